package sessionrec

import (
	"bytes"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	testingclock "k8s.io/utils/clock/testing"
)

// counter stamps what is queued 1ns, 2ns, ...
func counter() func() time.Duration {
	var at time.Duration
	return func() time.Duration { at++; return at }
}

// readAll reads a batch as the drainer does.
func readAll(b *batch) []byte {
	var got []byte
	for _, p := range b.pieces {
		for left := p.n; left > 0; {
			chunk := b.next(left)
			left -= len(chunk)
			got = append(got, chunk...)
		}
	}
	return got
}

func TestQueueKeepsOrderAcrossBlocksCopiedAndKept(t *testing.T) {
	g := NewWithT(t)
	q := newQueue(1<<30, counter())
	var want []byte
	copied := func(fromClient bool, n int, c byte) {
		p := bytes.Repeat([]byte{c}, n)
		q.push(fromClient, p)
		want = append(want, p...)
	}
	read := func(n int, c byte) (*block, bool) {
		blk := blocks.Get().(*block)
		copy(blk[:], bytes.Repeat([]byte{c}, n))
		want = append(want, blk[:n]...)
		return blk, q.pushBlock(false, blk, n)
	}
	copied(false, 10, 'a')
	_, kept := read(blockSize/2+1, 'b')
	g.Expect(kept).To(BeTrue(), "a read that fills half a block is queued as it is")
	copied(true, blockSize, 'c') // into what is left of the kept block, and on
	small, kept := read(100, 'd')
	g.Expect(kept).To(BeFalse(), "a small read is copied")
	small[0] = 'x' // the caller's again
	copied(false, 3, 'e')

	b := q.take()
	g.Expect(b.pieces).To(HaveLen(5))
	for i, p := range b.pieces {
		g.Expect(p.fromClient).To(Equal(i == 2))
		g.Expect(p.at).To(Equal(time.Duration(i + 1)))
	}
	g.Expect(readAll(b)).To(Equal(want))
	q.release(b)
	g.Expect(q.queued + q.taken).To(BeZero())

	q.close()
	q.push(false, make([]byte, 10))
	blk := blocks.Get().(*block)
	g.Expect(q.pushBlock(false, blk, blockSize)).To(BeFalse(), "after close nothing is queued, nor kept")
	b = q.take()
	g.Expect(b.closed).To(BeTrue())
	g.Expect(b.pieces).To(BeEmpty())
}

func TestQueueWaitsForRoom(t *testing.T) {
	const stall = 30 * time.Second
	clk := testingclock.NewFakeClock(time.Now())
	waiting := func(q *queue, n int) chan error {
		done := make(chan error, 1)
		go func() { done <- q.wait(n, clk, stall) }()
		return done
	}

	t.Run("until the drainer frees what it read", func(t *testing.T) {
		g := NewWithT(t)
		q := newQueue(3*blockSize, counter())
		q.push(false, make([]byte, 2*blockSize))
		g.Expect(q.wait(blockSize, clk, stall)).To(Succeed(), "what fits does not wait")
		q.push(false, make([]byte, blockSize))
		done := waiting(q, 1)
		g.Eventually(clk.HasWaiters).Should(BeTrue())
		g.Expect(done).NotTo(Receive())
		b := q.take()
		b.next(blockSize)
		b.next(blockSize) // the first block is read and freed
		g.Eventually(done).Should(Receive(BeNil()))
		q.release(b)
		g.Expect(clk.HasWaiters()).To(BeFalse())
	})
	t.Run("what is more than the limit waits for an empty queue", func(t *testing.T) {
		g := NewWithT(t)
		q := newQueue(100, counter())
		g.Expect(q.wait(1000, clk, stall)).To(Succeed())
		q.push(false, make([]byte, 1000))
		done := waiting(q, 1000)
		g.Eventually(clk.HasWaiters).Should(BeTrue())
		q.release(q.take())
		g.Eventually(done).Should(Receive(BeNil()))
	})
	t.Run("gives up when nothing is freed for the stall timeout", func(t *testing.T) {
		g := NewWithT(t)
		q := newQueue(3*blockSize, counter())
		q.push(false, make([]byte, 3*blockSize))
		done := waiting(q, 2*blockSize)
		g.Eventually(clk.HasWaiters).Should(BeTrue())
		clk.Step(stall - time.Nanosecond)
		g.Expect(done).NotTo(Receive())

		// Room, if not enough: the stall is timed anew.
		b := q.take()
		b.next(blockSize)
		b.next(blockSize)
		g.Eventually(func() bool {
			q.mu.Lock()
			defer q.mu.Unlock()
			return q.room != nil // the waiter took its timer up again, and waits
		}).Should(BeTrue())
		clk.Step(time.Nanosecond)
		g.Expect(done).NotTo(Receive())
		clk.Step(stall - 2*time.Nanosecond)
		g.Expect(done).NotTo(Receive())
		clk.Step(time.Nanosecond)
		g.Eventually(done).Should(Receive(MatchError(errStalled)))
		g.Expect(clk.HasWaiters()).To(BeFalse())
		q.release(b)
	})
	t.Run("close lets the waiters go", func(t *testing.T) {
		g := NewWithT(t)
		q := newQueue(100, counter())
		q.push(false, make([]byte, 100))
		done := waiting(q, 1)
		g.Eventually(clk.HasWaiters).Should(BeTrue())
		q.close()
		g.Eventually(done).Should(Receive(BeNil()))
	})
}
