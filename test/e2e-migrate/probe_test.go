//go:build e2e

package migrate

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// probe sends one kind of client's request to one cluster over and over, a pause between them, and keeps what a
// migration costs that client: requests answered and failed, and the longest time the cluster was unreachable
// through it (from the last answer before a failure to the next answer). A retrying probe retries a failed request
// within retryFor before it counts it failed, as a client that retries does; each failed try still marks the cluster
// unreachable for it.
type probe struct {
	kind, cluster string
	do            func(ctx context.Context) error
	retryFor      time.Duration

	mu       sync.Mutex
	phase    figures
	lastOK   time.Time
	failing  bool
	cancel   context.CancelFunc
	finished chan struct{}
}

// figures are a probe's counts over one phase of the migration.
type figures struct {
	answered, failed int
	// retried counts the tries that failed before a retrying probe's request was answered.
	retried     int
	longestDown time.Duration
	lastErr     string
}

const probeEvery = 250 * time.Millisecond

func startProbe(kind, cluster string, retryFor time.Duration, do func(ctx context.Context) error) *probe {
	ctx, cancel := context.WithCancel(context.Background())
	p := &probe{kind: kind, cluster: cluster, do: do, retryFor: retryFor, lastOK: time.Now(), cancel: cancel, finished: make(chan struct{})}
	go p.run(ctx)
	return p
}

func (p *probe) run(ctx context.Context) {
	defer close(p.finished)
	for ctx.Err() == nil {
		began := time.Now()
		var err error
		for {
			try, cancel := context.WithTimeout(ctx, 10*time.Second)
			err = p.do(try)
			cancel()
			if ctx.Err() != nil {
				return
			}
			p.record(err)
			if err == nil || time.Since(began) >= p.retryFor {
				break
			}
			p.mu.Lock()
			p.phase.retried++
			p.mu.Unlock()
			sleep(ctx, probeEvery)
		}
		p.mu.Lock()
		if err == nil {
			p.phase.answered++
		} else {
			p.phase.failed++
			p.phase.lastErr = err.Error()
		}
		p.mu.Unlock()
		sleep(ctx, probeEvery)
	}
}

// record notes one try: an answer ends a time unreachable, a failure starts or extends one.
func (p *probe) record(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	if err != nil {
		p.failing = true
		p.phase.longestDown = max(p.phase.longestDown, now.Sub(p.lastOK))
		return
	}
	if p.failing {
		p.phase.longestDown = max(p.phase.longestDown, now.Sub(p.lastOK))
	}
	p.failing, p.lastOK = false, now
}

// take returns the figures since the last take and starts a new phase; a cluster still unreachable counts until now.
func (p *probe) take() figures {
	p.mu.Lock()
	defer p.mu.Unlock()
	f := p.phase
	if p.failing {
		f.longestDown = max(f.longestDown, time.Since(p.lastOK))
	}
	p.phase = figures{}
	return f
}

func (p *probe) stop() {
	p.cancel()
	<-p.finished
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// table renders each probe's figures of a phase, one line per client kind and cluster.
func table(phase string, probes []*probe, got map[*probe]figures) string {
	lines := []string{fmt.Sprintf("%s:", phase)}
	for _, p := range probes {
		f := got[p]
		line := fmt.Sprintf("  %-44s %-12s answered %4d, failed %2d, retried tries %3d, longest unreachable %s",
			p.kind, p.cluster, f.answered, f.failed, f.retried, f.longestDown.Round(100*time.Millisecond))
		if f.failed > 0 {
			line += " (last: " + f.lastErr + ")"
		}
		lines = append(lines, line)
	}
	sort.Strings(lines[1:])
	return strings.Join(lines, "\n")
}
