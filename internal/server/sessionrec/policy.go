package sessionrec

import (
	"sync"
	"sync/atomic"
)

// FailsClosed says whether sessions that cannot be recorded are refused (Options.FailClosed).
func (r *Recorder) FailsClosed() bool { return r.opts.FailClosed }

// Health says whether the recorder's sink works: false after a recording could not be opened, written or stalled,
// until one succeeds, with what failed.
func (r *Recorder) Health() (up bool, message string) {
	r.health.mu.Lock()
	defer r.health.mu.Unlock()
	return !r.health.down.Load(), r.health.message
}

// sinkHealth is the state of a recorder's sink, which cluster_proxy_session_recording_sink_up reports.
type sinkHealth struct {
	down    atomic.Bool
	mu      sync.Mutex
	message string
}

// works records a success: cheap while the sink was up, as it is on every write.
func (h *sinkHealth) works() {
	if !h.down.Load() {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.down.Store(false)
	h.message = ""
	sinkUp.Set(1)
}

func (h *sinkHealth) failed(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.down.Store(true)
	h.message = err.Error()
	sinkUp.Set(0)
}
