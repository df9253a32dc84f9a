package sessionrec

import (
	"errors"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// blockSize is the unit the queued copies are kept in. Blocks are pooled: a session holds them only while its copies
// wait, and a burst costs no growing and copying of one large buffer. The tap reads what the cluster sends straight
// into blocks (tap.WriteTo), so that most of the output is queued without a copy.
const blockSize = 64 << 10

type block = [blockSize]byte

var blocks = sync.Pool{New: func() any { return new(block) }}

// errStalled says no room appeared in the queue for the stall timeout.
var errStalled = errors.New("no room for the stall timeout")

// queue is the bounded buffer between the tap and the drainer: copies in order, with the time they passed and their
// direction. The tap appends while the drainer records what it took; a tap that finds no room waits for it (wait).
type queue struct {
	mu     sync.Mutex
	chunks []chunk
	pieces []piece
	queued int // bytes waiting
	taken  int // bytes the drainer is recording
	limit  int
	closed bool
	// wake tells the drainer that something was queued, or the queue closed.
	wake chan struct{}
	// room is made by a tap that waits for room, and closed when the drainer frees some or the queue closes.
	room chan struct{}
	// since stamps what is queued: under the lock, so that the times are in the order of the queue.
	since func() time.Duration
	// The drainer's batch, and the slices of the last one, to reuse.
	batch       batch
	spareChunks []chunk
	spare       []piece
}

// chunk is a block and how many of its bytes are queued, from its start.
type chunk struct {
	b *block
	n int
}

// piece is what one Read or Write of the tap passed.
type piece struct {
	fromClient bool
	at         time.Duration
	n          int
}

func newQueue(limit int, since func() time.Duration) *queue {
	return &queue{limit: limit, since: since, wake: make(chan struct{}, 1)}
}

// wait returns once there is room for n more bytes, or the queue is empty (n may be more than the limit), or it is
// closed. It gives up with errStalled when the drainer frees nothing for stall.
func (q *queue) wait(n int, clk clock.Clock, stall time.Duration) error {
	q.mu.Lock()
	if q.hasRoomLocked(n) {
		q.mu.Unlock()
		return nil
	}
	room := q.roomLocked()
	q.mu.Unlock()
	timer := clk.NewTimer(stall)
	defer timer.Stop()
	for {
		select {
		case <-room:
		case <-timer.C():
			return errStalled
		}
		restart(timer, stall) // room appeared, if not enough: the drainer moves
		q.mu.Lock()
		if q.hasRoomLocked(n) {
			q.mu.Unlock()
			return nil
		}
		room = q.roomLocked()
		q.mu.Unlock()
	}
}

func (q *queue) hasRoomLocked(n int) bool {
	return q.closed || q.queued+q.taken == 0 || q.queued+q.taken+n <= q.limit
}

// restart times a stall anew.
func restart(t clock.Timer, d time.Duration) {
	if !t.Stop() {
		select {
		case <-t.C():
		default:
		}
	}
	t.Reset(d)
}

// progress is closed when the drainer next frees room, or the queue closes.
func (q *queue) progress() <-chan struct{} {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.roomLocked()
}

func (q *queue) roomLocked() chan struct{} {
	if q.room == nil {
		q.room = make(chan struct{})
	}
	return q.room
}

// freedLocked wakes whoever waits for room.
func (q *queue) freedLocked() {
	if q.room != nil {
		close(q.room)
		q.room = nil
	}
}

// push queues a copy of p. It does not wait for room: the tap waited before it read p (wait). After close it drops p.
func (q *queue) push(fromClient bool, p []byte) {
	if len(p) == 0 {
		return
	}
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return
	}
	q.pieces = append(q.pieces, piece{fromClient: fromClient, at: q.since(), n: len(p)})
	q.queued += len(p)
	for len(p) > 0 {
		last := len(q.chunks) - 1
		if last < 0 || q.chunks[last].n == blockSize {
			q.chunks = append(q.chunks, chunk{b: blocks.Get().(*block)})
			last++
		}
		c := &q.chunks[last]
		k := copy(c.b[c.n:], p)
		c.n += k
		p = p[k:]
	}
	q.mu.Unlock()
	q.wakeDrainer()
}

// pushBlock queues the first n bytes of blk, which the tap read them into. It keeps blk, and says so, when they fill
// at least half of it; fewer are copied, so that a block of queued bytes is never mostly empty. After close it drops
// them, and blk stays the caller's.
func (q *queue) pushBlock(fromClient bool, blk *block, n int) (kept bool) {
	if n < blockSize/2 {
		q.push(fromClient, blk[:n])
		return false
	}
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return false
	}
	q.pieces = append(q.pieces, piece{fromClient: fromClient, at: q.since(), n: n})
	q.queued += n
	// Copies that follow go into what is left of blk.
	q.chunks = append(q.chunks, chunk{b: blk, n: n})
	q.mu.Unlock()
	q.wakeDrainer()
	return true
}

func (q *queue) wakeDrainer() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// batch is what the drainer took: the pieces, and their bytes in chunks, read in order with next. Each block is
// freed as soon as it is read, so the tap has room again while the drainer is still busy with the batch.
type batch struct {
	q      *queue
	chunks []chunk
	pieces []piece
	// closed says nothing more will come.
	closed bool
	chunk  int
	at     int
}

// next returns the batch's next bytes, at most n, from one block.
func (b *batch) next(n int) []byte {
	c := &b.chunks[b.chunk]
	if b.at == c.n {
		b.q.free(c)
		b.chunk, b.at = b.chunk+1, 0
		c = &b.chunks[b.chunk]
	}
	k := min(n, c.n-b.at)
	p := c.b[b.at : b.at+k]
	b.at += k
	return p
}

// free returns a block the drainer has read.
func (q *queue) free(c *chunk) {
	blocks.Put(c.b)
	q.mu.Lock()
	q.taken -= c.n
	q.freedLocked()
	q.mu.Unlock()
	*c = chunk{}
}

// take waits for copies or the end and hands over what is queued, which the drainer holds until release.
func (q *queue) take() *batch {
	for {
		if b := q.tryTake(); b != nil {
			return b
		}
		<-q.wake
	}
}

// tryTake is take without the wait: nil when nothing is queued.
func (q *queue) tryTake() *batch {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.pieces) == 0 && !q.closed {
		return nil
	}
	q.batch = batch{q: q, chunks: q.chunks, pieces: q.pieces, closed: q.closed}
	q.chunks, q.pieces = q.spareChunks, q.spare
	q.spareChunks, q.spare = nil, nil
	q.taken, q.queued = q.queued, 0
	return &q.batch
}

// release frees what is left of a batch.
func (q *queue) release(b *batch) {
	for i := range b.chunks {
		if b.chunks[i].b != nil {
			blocks.Put(b.chunks[i].b)
			b.chunks[i] = chunk{}
		}
	}
	q.mu.Lock()
	q.taken = 0
	q.freedLocked()
	q.spareChunks, q.spare = b.chunks[:0], b.pieces[:0]
	q.mu.Unlock()
}

// close drops what comes after, and wakes the drainer and whoever waits for room.
func (q *queue) close() {
	q.mu.Lock()
	q.closed = true
	q.freedLocked()
	q.mu.Unlock()
	q.wakeDrainer()
}
