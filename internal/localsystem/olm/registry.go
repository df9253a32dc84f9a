package olm

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/process"
)

// Registry is distribution's registry (bin/olm/registry) serving images over plain HTTP at Host, its storage and log
// in a folder: where the hub's node pulls the bundle and catalog images from, as it would from a user's registry.
type Registry struct {
	// Host is host:port, the registry part of the names of its images.
	Host string
	proc *process.Process
}

// StartRegistry runs the registry on listen (host:port, an address of this machine) with its storage under dir, and
// returns once it answers.
func (t Tools) StartRegistry(ctx context.Context, dir, listen string) (*Registry, error) {
	if err := os.MkdirAll(filepath.Join(dir, "storage"), 0o755); err != nil {
		return nil, err
	}
	config := fmt.Sprintf(`version: 0.1
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: false
http:
  addr: %s
log:
  level: warn
`, filepath.Join(dir, "storage"), listen)
	configPath := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(configPath, []byte(config), 0o600); err != nil {
		return nil, err
	}
	p, err := process.Run(process.Command{Path: t.path("registry"), Args: []string{"serve", configPath},
		// Its tracing would export to localhost:4318; nothing listens there.
		Env:     append(os.Environ(), "OTEL_TRACES_EXPORTER=none", "OTEL_METRICS_EXPORTER=none", "OTEL_LOGS_EXPORTER=none"),
		LogPath: filepath.Join(dir, "registry.log")})
	if err != nil {
		return nil, err
	}
	r := &Registry{Host: listen, proc: p}
	client := &http.Client{Timeout: time.Second}
	err = poll(ctx, 30*time.Second, "the registry at "+listen, func(ctx context.Context) (bool, error) {
		if done, _ := p.Exited(); done {
			return false, fmt.Errorf("the registry exited (%s); its log: %s", p.ExitDescription(), p.LogPath())
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+listen+"/v2/", nil)
		if err != nil {
			return false, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		r.Stop()
		return nil, err
	}
	return r, nil
}

// Stop ends the registry; its folder stays.
func (r *Registry) Stop() {
	if r != nil && r.proc != nil {
		r.proc.Terminate(10 * time.Second)
	}
}

// Push writes img to the registry as repository:tag and returns its name, <Host>/<repository>:<tag>.
func (r *Registry) Push(ctx context.Context, repository, tag string, img v1.Image) (string, error) {
	ref, err := name.NewTag(r.Host+"/"+repository+":"+tag, name.Insecure)
	if err != nil {
		return "", err
	}
	if err := remote.Write(ref, img, remote.WithContext(ctx)); err != nil {
		return "", fmt.Errorf("push %s: %w", ref, err)
	}
	return ref.String(), nil
}

// Tag gives the image or index from (<Host>/<repository>:<tag>) a second tag, to, in its repository.
func (r *Registry) Tag(ctx context.Context, from, to string) error {
	src, err := name.NewTag(from, name.Insecure)
	if err != nil {
		return err
	}
	dst, err := name.NewTag(to, name.Insecure)
	if err != nil {
		return err
	}
	if dst.Context() != src.Context() {
		return fmt.Errorf("tag %s as %s: a tag names a manifest of its own repository", from, to)
	}
	desc, err := remote.Get(src, remote.WithContext(ctx))
	if err != nil {
		return fmt.Errorf("read %s: %w", from, err)
	}
	if err := remote.Tag(dst, desc, remote.WithContext(ctx)); err != nil {
		return fmt.Errorf("tag %s as %s: %w", from, to, err)
	}
	return nil
}

// accessLine is a line of the registry's access log: `<client> - - [<time>] "<method> <path> HTTP/1.1" <status> ...`.
var accessLine = regexp.MustCompile(`^(\S+) \S+ \S+ \[[^]]*\] "(\S+) (\S+) [^"]*" (\d{3}) `)

// Pulled reports whether the registry served the image ref (<Host>/<repository>:<tag>) to client (an IP address) as a
// node pulls it: its tag resolved, then its manifest fetched by digest.
func (r *Registry) Pulled(ctx context.Context, client net.IP, ref string) (bool, error) {
	tag, err := name.NewTag(ref, name.Insecure)
	if err != nil {
		return false, err
	}
	desc, err := remote.Head(tag, remote.WithContext(ctx))
	if err != nil {
		return false, fmt.Errorf("the digest of %s: %w", ref, err)
	}
	manifests := "/v2/" + tag.RepositoryStr() + "/manifests/"
	var resolved, fetched bool
	f, err := os.Open(r.proc.LogPath())
	if err != nil {
		return false, err
	}
	defer f.Close()
	lines := bufio.NewScanner(f)
	lines.Buffer(make([]byte, 64*1024), 1024*1024)
	for lines.Scan() {
		m := accessLine.FindStringSubmatch(lines.Text())
		if m == nil || m[1] != client.String() || m[4] != "200" {
			continue
		}
		// A node that pulls through a mirror names the registry the image names in a query (?ns=quay.io).
		path, _, _ := strings.Cut(m[3], "?")
		switch path {
		case manifests + tag.TagStr():
			resolved = true
		case manifests + desc.Digest.String():
			fetched = fetched || m[2] == http.MethodGet
		}
	}
	return resolved && fetched, lines.Err()
}
