// Package requestloop sends GET /readyz to a kube-apiserver one request after the other, with a pause between them,
// and records every answer and failure: the client side of the end-to-end suites' "no request lost" checks.
package requestloop

import (
	"context"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Loop is a running loop.
type Loop struct {
	mu       sync.Mutex
	ok       int
	failures []Failure
	cancel   context.CancelFunc
	done     chan struct{}
}

// Failure is a request that got no answer, or an error answer, at a time.
type Failure struct {
	At  time.Time
	Err string
	// LastOK is when the loop last got an answer before this failure (its start if it never did): failures with the
	// same LastOK are one run of consecutive failures.
	LastOK time.Time
}

// Start starts a loop against cfg (each request bounded by 10 s) with a pause of every between requests.
func Start(cfg *rest.Config, every time.Duration) (*Loop, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = 10 * time.Second
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	rc := cs.Discovery().RESTClient()
	ctx, cancel := context.WithCancel(context.Background())
	l := &Loop{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		lastOK := time.Now()
		for ctx.Err() == nil {
			_, err := rc.Get().AbsPath("/readyz").DoRaw(ctx)
			if ctx.Err() != nil {
				return
			}
			l.mu.Lock()
			if err != nil {
				l.failures = append(l.failures, Failure{At: time.Now(), Err: err.Error(), LastOK: lastOK})
			} else {
				l.ok++
				lastOK = time.Now()
			}
			l.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(every):
			}
		}
	}()
	return l, nil
}

// Succeeded is the number of answered requests so far.
func (l *Loop) Succeeded() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ok
}

// Stop ends the loop and returns what it saw.
func (l *Loop) Stop() (ok int, failures []Failure) {
	l.cancel()
	<-l.done
	return l.ok, l.failures
}

// Gap is the time from the first failure to the last one; zero without failures.
func Gap(failures []Failure) time.Duration {
	if len(failures) == 0 {
		return 0
	}
	return failures[len(failures)-1].At.Sub(failures[0].At)
}
