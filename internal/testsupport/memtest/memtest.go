// Package memtest measures what code allocates, for tests that assert a hot path reuses its buffers.
package memtest

import "runtime"

// BytesPerRun is testing.AllocsPerRun for bytes: the heap bytes f allocates per call, on average over runs calls
// after a warm-up call.
func BytesPerRun(runs int, f func()) uint64 {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	f()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range runs {
		f()
	}
	runtime.ReadMemStats(&after)
	return (after.TotalAlloc - before.TotalAlloc) / uint64(runs) //nolint:gosec // runs is positive
}
