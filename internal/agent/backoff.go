package agent

import (
	"math/rand/v2"
	"time"
)

// backoff spaces connection attempts: it starts at min, doubles up to max, and spreads each wait by ±20% so agents
// that lost the same proxy-server do not come back in lockstep.
type backoff struct {
	min, max time.Duration
	cur      time.Duration
}

func (b *backoff) next() time.Duration {
	if b.cur == 0 {
		b.cur = b.min
	} else {
		b.cur = min(2*b.cur, b.max)
	}
	d := time.Duration(float64(b.cur) * (0.8 + 0.4*rand.Float64())) //nolint:gosec // jitter, not a secret
	return min(d, b.max)
}

func (b *backoff) reset() { b.cur = 0 }

// duplicateTries is how many connections per proxy-server the agent is told of may land, one after the other, on
// servers it already holds before it backs off: behind one address each connection reaches a server at random, so a
// missing one of three is found within nine tries with a probability of 97%.
const duplicateTries = 3

// landings spaces the connections that land on a proxy-server the agent already holds. A landing there is no
// failure: the next try goes out after the shortest wait, so a new replica is reached within a second, until
// duplicateTries per server have landed in a row; then the waits grow as after a failure, so an agent told of more
// servers than answer does not hammer them.
type landings struct {
	bo         *backoff
	duplicates int
}

// duplicate is the wait after a connection landed on a server already held, with want servers to hold.
func (l *landings) duplicate(want int) time.Duration {
	l.duplicates++
	if l.duplicates <= duplicateTries*max(want, 1) {
		return l.bo.min
	}
	return l.bo.next()
}

// reached records a connection to a server not held yet.
func (l *landings) reached() { l.duplicates = 0 }
