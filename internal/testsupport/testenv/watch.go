package testenv

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// WatchSeesNamespace runs 'kubectl get namespaces --watch-only -o name' from KUBEBUILDER_ASSETS with kubeconfig and
// creates namespaces named watched-<time> with create until the watch streams one of them, each attempt waiting up
// to wait for the event: the watch may not be established when the first namespace is made. It fails when nothing
// arrives within timeout, when kubectl ends, or when the watch streams anything else.
func WatchSeesNamespace(ctx context.Context, kubeconfig string, create func(ctx context.Context, name string) error, wait, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kubectl"), "--kubeconfig", kubeconfig,
		"get", "namespaces", "--watch-only", "-o", "name")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start kubectl watch: %w", err)
	}
	lines := make(chan string, 16)
	go func() {
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			lines <- s.Text()
		}
		close(lines)
	}()
	waited := false
	defer func() {
		cancel()
		if !waited {
			_ = cmd.Wait()
		}
	}()

	last := errors.New("no attempt")
	for ctx.Err() == nil {
		name := "watched-" + strings.ReplaceAll(time.Now().Format("150405.000000"), ".", "-")
		if err := create(ctx, name); err != nil {
			last = fmt.Errorf("create namespace %s: %w", name, err)
			continue
		}
		select {
		case line, ok := <-lines:
			if !ok {
				waited = true
				_ = cmd.Wait() // stderr is complete once kubectl has been waited for
				return fmt.Errorf("kubectl watch ended: %s", stderr.String())
			}
			if strings.HasPrefix(line, "namespace/watched-") {
				return nil
			}
			last = fmt.Errorf("the watch streamed %q, not a watched- namespace", line)
		case <-time.After(wait):
			last = errors.New("the watch streamed nothing")
		case <-ctx.Done():
		}
	}
	return fmt.Errorf("within %s: %w", timeout, last)
}
