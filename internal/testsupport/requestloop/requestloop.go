// Package requestloop sends one request after the other, with a pause between them, and records every answer and
// failure: the client side of the end-to-end suites' "no request lost" checks. Start sends GET /readyz to a
// kube-apiserver; Run sends any request, and retries a failed one for a while when asked, as a retrying client does.
package requestloop

import (
	"context"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// tryTimeout bounds each try of a request.
const tryTimeout = 10 * time.Second

// Loop is a running loop.
type Loop struct {
	do       func(context.Context) error
	every    time.Duration
	retryFor time.Duration

	mu sync.Mutex
	// phase is what the loop saw since it started or since the last Take.
	phase Figures
	// lastOK is when a try was last answered (the start if none was); failing is whether the latest try failed.
	lastOK  time.Time
	failing bool
	// lastErr is the error of the latest failed try.
	lastErr string
	cancel  context.CancelFunc
	done    chan struct{}
}

// Failure is a request that got no answer, or an error answer, at a time.
type Failure struct {
	At  time.Time
	Err string
	// LastOK is when the loop last got an answer before this failure (its start if it never did): failures with the
	// same LastOK are one run of consecutive failures.
	LastOK time.Time
}

// Figures are what a loop saw over a span of time.
type Figures struct {
	// OK counts answered requests; Failures are the requests that failed (after their retries, with Run's retryFor).
	OK       int
	Failures []Failure
	// Retried counts the tries that failed before their request was answered (Run with a retryFor).
	Retried int
	// LongestUnreachable is the longest time from an answer to the next one across failed tries: how long the target
	// could not be reached this way. A run of failures still going counts until the Figures were taken.
	LongestUnreachable time.Duration
}

// Start starts a loop of GET /readyz against cfg (each request bounded by 10 s) with a pause of every between
// requests.
func Start(cfg *rest.Config, every time.Duration) (*Loop, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = tryTimeout
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	rc := cs.Discovery().RESTClient()
	return Run(func(ctx context.Context) error {
		_, err := rc.Get().AbsPath("/readyz").DoRaw(ctx)
		return err
	}, every, 0), nil
}

// Run starts a loop that calls do (each try bounded by 10 s) with a pause of every between requests. A request whose
// try fails is tried again, every apart, until one is answered or retryFor has passed since its first try; only then
// is it a Failure. Every failed try counts toward LongestUnreachable.
func Run(do func(context.Context) error, every, retryFor time.Duration) *Loop {
	ctx, cancel := context.WithCancel(context.Background())
	l := &Loop{do: do, every: every, retryFor: retryFor, lastOK: time.Now(), cancel: cancel, done: make(chan struct{})}
	go l.run(ctx)
	return l
}

func (l *Loop) run(ctx context.Context) {
	defer close(l.done)
	for ctx.Err() == nil {
		began := time.Now()
		for {
			try, cancel := context.WithTimeout(ctx, tryTimeout)
			err := l.do(try)
			cancel()
			if ctx.Err() != nil {
				return
			}
			if !l.record(err, time.Since(began) < l.retryFor) {
				break
			}
			sleep(ctx, l.every)
		}
		sleep(ctx, l.every)
	}
}

// record notes one try at now and reports whether to try the request again: it failed and retry says there is time.
func (l *Loop) record(err error, retry bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if err == nil {
		if l.failing {
			l.phase.LongestUnreachable = max(l.phase.LongestUnreachable, now.Sub(l.lastOK))
		}
		l.failing, l.lastOK = false, now
		l.phase.OK++
		return false
	}
	l.failing, l.lastErr = true, err.Error()
	l.phase.LongestUnreachable = max(l.phase.LongestUnreachable, now.Sub(l.lastOK))
	if retry {
		l.phase.Retried++
		return true
	}
	l.phase.Failures = append(l.phase.Failures, Failure{At: now, Err: err.Error(), LastOK: l.lastOK})
	return false
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// Succeeded is the number of answered requests since the start or the last Take.
func (l *Loop) Succeeded() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.phase.OK
}

// Answering reports whether the latest try was answered within the last within: the target is reachable again.
func (l *Loop) Answering(within time.Duration) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.failing && time.Since(l.lastOK) < within
}

// LastError is the error of the latest failed try, empty if none failed yet.
func (l *Loop) LastError() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastErr
}

// Take returns what the loop saw since its start or the last Take, and starts counting anew.
func (l *Loop) Take() Figures {
	l.mu.Lock()
	defer l.mu.Unlock()
	f := l.phase
	if l.failing {
		f.LongestUnreachable = max(f.LongestUnreachable, time.Since(l.lastOK))
	}
	l.phase = Figures{}
	return f
}

// Stop ends the loop and returns what it saw since its start or the last Take.
func (l *Loop) Stop() (ok int, failures []Failure) {
	l.cancel()
	<-l.done
	f := l.Take()
	return f.OK, f.Failures
}

// Gap is the time from the first failure to the last one; zero without failures.
func Gap(failures []Failure) time.Duration {
	if len(failures) == 0 {
		return 0
	}
	return failures[len(failures)-1].At.Sub(failures[0].At)
}
