package packet

import (
	"math/bits"
	"sync"

	"google.golang.org/grpc/mem"
)

// Buffers of 256 B to 32 KiB, in powers of two, are pooled; others are allocated and left to the garbage collector.
const (
	minPooledShift = 8
	maxPooledShift = 15
)

// dirtyPool is the pool of the DATA payloads Codec decodes, and the proxy-server's agent endpoint's gRPC buffer pool.
// gRPC's own pool clears every buffer it hands out, which cost 4 % of a bulk download's CPU; these buffers are always
// written whole before they are read (the framer reads a frame's length into them, the codec copies a payload's), so
// clearing them protects nothing. What proves it: stale_test.go decodes into buffers whose every byte differs from the
// one expected, and make test runs the data plane's tests again with released buffers poisoned (poison.go), among them
// streams of several clusters at once that check every byte they get back (internal/server/tenants_test.go).
type dirtyPool struct {
	tiers [maxPooledShift - minPooledShift + 1]sync.Pool
}

var _ mem.BufferPool = (*dirtyPool)(nil)

var Buffers = &dirtyPool{}

// tier is the index of the smallest tier that holds n bytes, or len(tiers) when none does.
func (p *dirtyPool) tier(n int) int {
	if n <= 1<<minPooledShift {
		return 0
	}
	return min(bits.Len(uint(n-1))-minPooledShift, len(p.tiers))
}

func (p *dirtyPool) Get(n int) *[]byte {
	i := p.tier(n)
	if i == len(p.tiers) {
		b := make([]byte, n)
		return &b
	}
	if poisonReleased {
		return poisoned.get(i, n, 1<<(minPooledShift+i))
	}
	if b, ok := p.tiers[i].Get().(*[]byte); ok {
		*b = (*b)[:n]
		return b
	}
	b := make([]byte, n, 1<<(minPooledShift+i))
	return &b
}

func (p *dirtyPool) Put(b *[]byte) {
	c := cap(*b)
	if c < 1<<minPooledShift || c > 1<<maxPooledShift || c&(c-1) != 0 {
		return
	}
	i := bits.Len(uint(c)) - 1 - minPooledShift
	if poisonReleased {
		poisoned.put(i, b)
		return
	}
	p.tiers[i].Put(b)
}
