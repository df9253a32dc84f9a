//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// requestLoop GETs /readyz of a managed cluster through the user-server, one request after the other with a pause
// of every between them, until Stop; it counts the answers and records each failure with its time.
type requestLoop struct {
	mu       sync.Mutex
	ok       int
	failures []loopFailure
	cancel   context.CancelFunc
	done     chan struct{}
}

type loopFailure struct {
	at  time.Time
	err string
}

func startLoop(cfg *rest.Config, every time.Duration) *requestLoop {
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = 10 * time.Second
	rc := must(kubernetes.NewForConfig(cfg)).Discovery().RESTClient()
	c, cancel := context.WithCancel(ctx())
	l := &requestLoop{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer GinkgoRecover()
		defer close(l.done)
		for c.Err() == nil {
			_, err := rc.Get().AbsPath("/readyz").DoRaw(c)
			if c.Err() != nil {
				return
			}
			l.mu.Lock()
			if err != nil {
				l.failures = append(l.failures, loopFailure{at: time.Now(), err: err.Error()})
			} else {
				l.ok++
			}
			l.mu.Unlock()
			select {
			case <-c.Done():
			case <-time.After(every):
			}
		}
	}()
	return l
}

// succeeded is the number of answered requests so far.
func (l *requestLoop) succeeded() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ok
}

// Stop ends the loop and returns what it saw.
func (l *requestLoop) Stop() (ok int, failures []loopFailure) {
	l.cancel()
	<-l.done
	return l.ok, l.failures
}

// gap is the time from the first failure to the last one; zero without failures.
func gap(failures []loopFailure) time.Duration {
	if len(failures) == 0 {
		return 0
	}
	return failures[len(failures)-1].at.Sub(failures[0].at)
}

// report writes a loop's figures to the spec's output.
func report(what string, ok int, failures []loopFailure) {
	AddReportEntry(what, fmt.Sprintf("%d answered, %d failed, failures over %s", ok, len(failures), gap(failures).Round(10*time.Millisecond)))
	for _, f := range failures {
		GinkgoWriter.Printf("    %s %s\n", f.at.Format("15:04:05.000"), f.err)
	}
}
