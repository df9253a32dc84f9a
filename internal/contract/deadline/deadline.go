// Package deadline is the read and write deadline of in-memory connections (the agent's service-proxy pipe, the
// proxy-server's in-process tunnels): net.Conn's SetDeadline semantics over a channel that blocked operations select on.
package deadline

import (
	"sync"
	"time"
)

// Deadline is a settable point in time with a channel that is closed once it has passed; the zero value has none.
type Deadline struct {
	mu    sync.Mutex
	gen   uint64
	timer *time.Timer
	ch    chan struct{}
}

func (d *Deadline) chanLocked() chan struct{} {
	if d.ch == nil {
		d.ch = make(chan struct{})
	}
	return d.ch
}

// Set moves the deadline; the zero time removes it.
func (d *Deadline) Set(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.gen++
	if d.timer != nil {
		d.timer.Stop()
		d.timer = nil
	}
	ch := d.chanLocked()
	select {
	case <-ch: // passed: the next deadline needs a fresh channel
		ch = make(chan struct{})
		d.ch = ch
	default:
	}
	if t.IsZero() {
		return
	}
	wait := time.Until(t)
	if wait <= 0 {
		close(ch)
		return
	}
	gen := d.gen
	d.timer = time.AfterFunc(wait, func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.gen == gen {
			close(ch)
		}
	})
}

// Wait is closed once the deadline has passed.
func (d *Deadline) Wait() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.chanLocked()
}

// Expired reports whether the deadline has passed.
func (d *Deadline) Expired() bool {
	select {
	case <-d.Wait():
		return true
	default:
		return false
	}
}
