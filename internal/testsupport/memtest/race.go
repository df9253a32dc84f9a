//go:build race

package memtest

// PoolsReuse is false under the race detector: sync.Pool then drops a quarter of what it is given, at random, so
// a path that reuses pooled buffers allocates anyway.
const PoolsReuse = false
