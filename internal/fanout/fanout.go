// Package fanout runs one call per item with a bound on how many run at once, as the health probes of many
// clusters do.
package fanout

import (
	"context"
	"sync"
)

// Run calls fn(i) for every i in [0, n), at most limit calls at a time (limit below 1 means 1), and returns when all
// started calls have returned. Once ctx ends no further call starts.
func Run(ctx context.Context, n, limit int, fn func(i int)) {
	slots := make(chan struct{}, max(limit, 1))
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := range n {
		if ctx.Err() != nil {
			return // a free slot and an ended ctx both ready: select would pick either
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		wg.Go(func() {
			defer func() { <-slots }()
			fn(i)
		})
	}
}
