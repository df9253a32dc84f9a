// Package soak is the pure part of make soak: a scheduler that draws faults from a seed, a book and a hang probe of the
// long-lived streams, and a report that holds the faults against the failed requests and the streams' ends, with the
// goals it checks. test/e2e/soak_test.go wires it to the local system.
package soak

import (
	"cmp"
	"context"
	"math/rand/v2"
	"time"

	"k8s.io/utils/clock"
)

const (
	// MinGap and MaxGap bound the pause before each fault starts.
	MinGap, MaxGap = 5 * time.Second, 25 * time.Second
	// MaxRunning faults run at the same time at most.
	MaxRunning = 2
)

// Kind is a kind of fault. Faults of one group never run at the same time; a kind without a group is a group of its
// own, so that it never overlaps with itself.
type Kind struct {
	Name  string
	Group string
}

func (k Kind) group() string { return cmp.Or(k.Group, k.Name) }

// Scheduler draws, from one seed, when each fault starts and of which kind it is.
type Scheduler struct {
	seed  uint64
	rng   *rand.Rand
	kinds []Kind
	// picked counts the faults picked so far: each gets a random source of its own.
	picked uint64
}

// NewScheduler draws from seed among kinds.
func NewScheduler(seed uint64, kinds []Kind) *Scheduler {
	return &Scheduler{seed: seed, rng: rand.New(rand.NewPCG(seed, 0)), kinds: kinds}
}

// Gap is the pause before the next fault, uniform in [MinGap, MaxGap].
func (s *Scheduler) Gap() time.Duration {
	return MinGap + time.Duration(s.rng.Int64N(int64(MaxGap-MinGap)+1))
}

// Pick chooses at random a kind whose group none of running holds, and gives it a random source of its own for its
// targets and durations: its draws then depend on the seed and its place in the run, not on when the faults beside it
// draw. ok is false when MaxRunning faults run or no group is free.
func (s *Scheduler) Pick(running []Kind) (kind Kind, r *rand.Rand, ok bool) {
	if len(running) >= MaxRunning {
		return Kind{}, nil, false
	}
	busy := map[string]bool{}
	for _, k := range running {
		busy[k.group()] = true
	}
	var free []Kind
	for _, k := range s.kinds {
		if !busy[k.group()] {
			free = append(free, k)
		}
	}
	if len(free) == 0 {
		return Kind{}, nil, false
	}
	s.picked++
	return free[s.rng.IntN(len(free))], rand.New(rand.NewPCG(s.seed, s.picked)), true
}

// Injector injects one fault of kind, drawing its target with r, waits until the system has recovered from it, and
// returns what happened. Run fills in Kind, and Start and End when they are zero.
type Injector func(ctx context.Context, kind Kind, r *rand.Rand) Fault

// Run starts faults for duration, from clk's present: after each Gap it waits for a free slot (fewer than MaxRunning
// faults running), picks a kind and runs inject in a goroutine of its own. It returns once duration has passed and
// every fault it started has returned, the faults in the order they started. When ctx ends no further fault starts;
// the running ones have ctx to end early.
func (s *Scheduler) Run(ctx context.Context, clk clock.Clock, duration time.Duration, inject Injector) []Fault {
	type result struct {
		i int
		f Fault
	}
	deadline := clk.Now().Add(duration)
	done := make(chan result)
	running := map[int]Kind{}
	var faults []Fault
	collect := func(r result) {
		faults[r.i] = r.f
		delete(running, r.i)
	}
	// wait waits for until (nil: a fault's end), collecting the faults that end meanwhile; false when ctx ended.
	wait := func(until <-chan time.Time) bool {
		for {
			select {
			case <-ctx.Done():
				return false
			case r := <-done:
				collect(r)
				if until == nil {
					return true
				}
			case <-until:
				return true
			}
		}
	}
	for {
		gap := s.Gap()
		if !clk.Now().Add(gap).Before(deadline) || !wait(clk.After(gap)) {
			break
		}
		for len(running) >= MaxRunning {
			if !wait(nil) {
				break
			}
		}
		if ctx.Err() != nil || !clk.Now().Before(deadline) {
			break
		}
		busy := make([]Kind, 0, len(running))
		for _, k := range running {
			busy = append(busy, k)
		}
		kind, r, ok := s.Pick(busy)
		if !ok {
			continue
		}
		i, start := len(faults), clk.Now()
		faults = append(faults, Fault{Kind: kind.Name, Start: start})
		running[i] = kind
		go func() {
			f := inject(ctx, kind, r)
			f.Kind = kind.Name
			if f.Start.IsZero() {
				f.Start = start
			}
			if f.End.IsZero() {
				f.End = clk.Now()
			}
			done <- result{i, f}
		}()
	}
	for len(running) > 0 {
		collect(<-done)
	}
	return faults
}
