//go:build poisonbuffers

package packet

import (
	"fmt"
	"os"
	"runtime/debug"
	"sync"
)

// poisonReleased is true in test builds with the tag poisonbuffers (make test runs the data plane's packages so).
// Released buffers are then kept on free lists of their own instead of sync.Pool, overwritten with 0xFF, and checked
// against release twice: a reader that still holds a payload it handed back reads 0xFF where its bytes were, and a
// payload released twice (which would give one buffer to two streams) ends the test binary, at once rather than when
// two streams happen to draw it.
const poisonReleased = true

// poisonByte is what a released buffer holds until it is handed out again.
const poisonByte = 0xFF

// poisoned are the free lists, one per tier.
var poisoned poisonLists

// poisonListLength bounds a tier's free list; a buffer released to a full list is left to the garbage collector.
const poisonListLength = 1024

type poisonLists struct {
	mu   sync.Mutex
	free [maxPooledShift - minPooledShift + 1][]*[]byte
}

func (l *poisonLists) get(tier, n, capacity int) *[]byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	if k := len(l.free[tier]); k > 0 {
		b := l.free[tier][k-1]
		l.free[tier] = l.free[tier][:k-1]
		for _, v := range (*b)[:cap(*b)] {
			if v != poisonByte {
				fail("a pooled buffer was written after its release")
			}
		}
		*b = (*b)[:n]
		return b
	}
	b := make([]byte, n, capacity)
	return &b
}

func (l *poisonLists) put(tier int, b *[]byte) {
	whole := (*b)[:cap(*b)]
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, f := range l.free[tier] {
		if &(*f)[:1][0] == &whole[0] {
			fail(fmt.Sprintf("a pooled buffer of %d bytes was released twice", cap(whole)))
		}
	}
	for i := range whole {
		whole[i] = poisonByte
	}
	if len(l.free[tier]) < poisonListLength {
		l.free[tier] = append(l.free[tier], b)
	}
}

// fail ends the process with what went wrong and where. Not a panic: the caller may hold locks that the deferred calls
// of an unwinding panic would wait for.
func fail(what string) {
	fmt.Fprintf(os.Stderr, "poisonbuffers: %s\n%s", what, debug.Stack())
	os.Exit(2)
}
