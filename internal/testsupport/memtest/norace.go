//go:build !race

package memtest

// PoolsReuse is whether sync.Pool hands back what it was given, which tests of buffer reuse rely on: true, except
// under the race detector.
const PoolsReuse = true
