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
