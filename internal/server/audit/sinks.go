package audit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"gopkg.in/natefinch/lumberjack.v2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/apiserver/pkg/audit"
	"k8s.io/apiserver/pkg/util/webhook"
	"k8s.io/apiserver/plugin/pkg/audit/buffered"
	pluginlog "k8s.io/apiserver/plugin/pkg/audit/log"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/clock"
)

// strictRetryInterval is how often a blocking-strict sink that is down lets a request through anyway, so that the
// request's event tries the sink again (when the policy omits RequestReceived, nothing else would).
const strictRetryInterval = time.Second

// maxReasonLength bounds the reason a sink gives for being down.
const maxReasonLength = 512

// sink is one place events go, the log or the webhook, in its mode, and what is known of its health.
//
// In batch mode events wait in kube-apiserver's buffered backend, whose delegate (countingBackend) writes them. held
// counts the events handed over and not yet written or failed, whether they wait in the buffer or in a batch being
// sent: beyond capacity (the buffer size) an event is dropped here, so the buffered backend's queue never blocks, and
// a webhook retrying batches cannot hold more than that many events either.
type sink struct {
	name     string // the sink label: sinkLog or sinkWebhook
	mode     string
	send     audit.Backend // buffered<countingBackend> in batch mode, the countingBackend otherwise
	capacity int64
	held     atomic.Int64
	closed   atomic.Bool
	closer   io.Closer // the log file, closed at Shutdown
	clock    clock.PassiveClock
	logger   func() logr.Logger

	sent, failed, dropped prometheus.Counter
	upGauge               prometheus.Gauge

	isUp    atomic.Bool // what mu guards says, read without it on the way of every event
	mu      sync.Mutex
	up      bool
	reason  string
	since   time.Time
	lastTry time.Time // the last write, or request let through while down (blocking-strict)
}

// newSink wraps deliver, which writes events to the sink or says why it could not, in the counting backend and, in
// batch mode, in kube-apiserver's buffered backend.
func newSink(name, mode string, batch buffered.BatchConfig, deliver func([]*auditinternal.Event) error,
	c clock.PassiveClock, logger func() logr.Logger) *sink {
	s := &sink{
		name:    name,
		mode:    mode,
		clock:   c,
		logger:  logger,
		sent:    eventsTotal.WithLabelValues(name, resultSent),
		failed:  eventsTotal.WithLabelValues(name, resultError),
		dropped: eventsTotal.WithLabelValues(name, resultDropped),
		upGauge: sinkUp.WithLabelValues(name),
		up:      true,
		since:   c.Now(),
	}
	s.isUp.Store(true)
	s.upGauge.Set(1)
	counting := &countingBackend{s: s, deliver: deliver}
	if mode == ModeBatch {
		s.send = buffered.NewBackend(counting, batch)
		s.capacity = int64(batch.BufferSize)
	} else {
		s.send = counting
	}
	return s
}

// process hands ev to the sink: it is written before process returns unless the sink is in batch mode. false says
// the sink did not take it (dropped, or failed to write it).
func (s *sink) process(ev *auditinternal.Event) bool {
	if s.closed.Load() {
		s.drop(1, "the auditor is shut down")
		return false
	}
	if s.mode != ModeBatch {
		return s.send.ProcessEvents(ev)
	}
	if s.held.Add(1) > s.capacity {
		s.held.Add(-1)
		s.drop(1, fmt.Sprintf("its buffer of %d events is full", s.capacity))
		return false
	}
	// The buffered backend takes a copy; false only once it shut down (it recovers from sending on its closed queue).
	if !s.send.ProcessEvents(ev) {
		s.held.Add(-1)
		s.drop(1, "the auditor is shut down")
		return false
	}
	return true
}

func (s *sink) drop(n int, why string) {
	s.dropped.Add(float64(n))
	s.setHealth(false, fmt.Sprintf("dropped %d event(s): %s", n, why))
}

// record counts n events the sink wrote, or failed to write with err.
func (s *sink) record(n int, err error) {
	if err == nil {
		s.sent.Add(float64(n))
		s.setHealth(true, "")
		return
	}
	s.failed.Add(float64(n))
	s.setHealth(false, fmt.Sprintf("failed to record %d event(s): %s", n, describe(err)))
}

func (s *sink) setHealth(up bool, reason string) {
	if up && s.isUp.Load() {
		return
	}
	s.mu.Lock()
	changed := s.up != up
	s.up = up
	s.isUp.Store(up)
	s.reason = reason
	if changed {
		s.since = s.clock.Now()
	}
	if up {
		s.upGauge.Set(1)
	} else {
		s.upGauge.Set(0)
	}
	s.mu.Unlock()
	if !changed {
		return
	}
	if up {
		s.logger().Info("Audit sink records events again", "sink", s.name)
	} else {
		s.logger().Error(errors.New(reason), "Audit sink cannot record events", "sink", s.name, "mode", s.mode)
	}
}

// tried notes a write, for admit.
func (s *sink) tried() {
	s.mu.Lock()
	s.lastTry = s.clock.Now()
	s.mu.Unlock()
}

// admit says whether a blocking-strict sink lets a request through: while it is up, and once per strictRetryInterval
// while it is down, so that the request's event tries it again.
func (s *sink) admit() bool {
	if s.isUp.Load() {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.up {
		return true
	}
	now := s.clock.Now()
	if now.Sub(s.lastTry) < strictRetryInterval {
		return false
	}
	s.lastTry = now
	return true
}

func (s *sink) health() SinkHealth {
	s.mu.Lock()
	defer s.mu.Unlock()
	return SinkHealth{Sink: s.name, Mode: s.mode, Up: s.up, LastError: s.reason, Since: s.since}
}

// countingBackend is the delegate of a sink (the buffered backend's, in batch mode): it writes events with deliver
// and counts the outcome, so that failures of asynchronous batches are seen as well as those of blocking writes.
type countingBackend struct {
	s       *sink
	deliver func([]*auditinternal.Event) error
}

var _ audit.Backend = &countingBackend{}

func (c *countingBackend) ProcessEvents(events ...*auditinternal.Event) bool {
	if c.s.mode == ModeBlockingStrict {
		c.s.tried()
	}
	err := c.deliver(events)
	if c.s.mode == ModeBatch {
		c.s.held.Add(-int64(len(events)))
	}
	c.s.record(len(events), err)
	return err == nil
}

func (c *countingBackend) Run(<-chan struct{}) error { return nil }
func (c *countingBackend) Shutdown()                 {}
func (c *countingBackend) String() string            { return "counting<" + c.s.name + ">" }

// describe is err for a sink's health and the log: a URL loses its user and query, the whole is bounded.
func describe(err error) string {
	msg := err.Error()
	var ue *url.Error
	if errors.As(err, &ue) {
		u := ue.URL
		if parsed, perr := url.Parse(ue.URL); perr == nil {
			parsed.User, parsed.RawQuery, parsed.Fragment = nil, "", ""
			u = parsed.String()
		}
		msg = fmt.Sprintf("%s %q: %v", ue.Op, u, ue.Err)
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) && status.Status().Code != 0 {
		msg = fmt.Sprintf("answered %d: %s", status.Status().Code, msg)
	}
	if len(msg) > maxReasonLength {
		msg = msg[:maxReasonLength] + "..."
	}
	return msg
}

// logWriter keeps the last write error for the sink's health: the log backend reports only that a write failed.
type logWriter struct {
	w   io.Writer
	err atomic.Pointer[error]
}

func (w *logWriter) Write(p []byte) (int, error) {
	n, err := w.w.Write(p)
	if err != nil {
		w.err.Store(&err)
	}
	return n, err
}

func (w *logWriter) takeErr() error {
	if p := w.err.Swap(nil); p != nil {
		return *p
	}
	return nil
}

// logDelivery writes events to w as kube-apiserver's log backend does: one audit.k8s.io/v1 Event in JSON a line.
func logDelivery(w io.Writer) func([]*auditinternal.Event) error {
	lw := &logWriter{w: w}
	backend := pluginlog.NewBackend(lw, pluginlog.FormatJson, auditv1.SchemeGroupVersion)
	return func(events []*auditinternal.Event) error {
		if backend.ProcessEvents(events...) {
			return nil
		}
		if err := lw.takeErr(); err != nil {
			return err
		}
		return errors.New("the log backend could not encode or write them")
	}
}

// openLog opens the log file as kube-apiserver does (--audit-log-path): "-" is standard output; the file and its
// directory are created (0600, 0700); with LogMaxSize 0 it is appended to and never rotated, otherwise lumberjack
// rotates it.
func openLog(o Options) (io.Writer, io.Closer, error) {
	if o.LogPath == "-" {
		return os.Stdout, nil, nil
	}
	if err := os.MkdirAll(filepath.Dir(o.LogPath), 0o700); err != nil {
		return nil, nil, err
	}
	f, err := os.OpenFile(o.LogPath, os.O_CREATE|os.O_APPEND|os.O_RDWR, 0o600)
	if err != nil {
		return nil, nil, err
	}
	if o.LogMaxSize == 0 {
		return f, f, nil
	}
	if err := f.Close(); err != nil {
		return nil, nil, err
	}
	l := &lumberjack.Logger{
		Filename:   o.LogPath,
		MaxAge:     o.LogMaxAge,
		MaxBackups: o.LogMaxBackups,
		MaxSize:    o.LogMaxSize,
		Compress:   o.LogCompress,
	}
	return l, l, nil
}

// webhookDelivery sends events as kube-apiserver's webhook backend does: an audit.k8s.io/v1 EventList in one POST to
// the server of the kubeconfig, retried on every error with exponential backoff. It is that backend's few lines on
// the same GenericWebhook, but it returns the error, which the plugin only logs: the sink's health names it.
func webhookDelivery(kubeconfig string, initialBackoff time.Duration) (func([]*auditinternal.Event) error, error) {
	// client-go takes the pod's own ServiceAccount for a kubeconfig without a cluster; an audit webhook must be named.
	if file, err := clientcmd.LoadFromFile(kubeconfig); err != nil {
		return nil, err
	} else if clientcmdapi.IsConfigEmpty(file) {
		return nil, fmt.Errorf("%s names no webhook", kubeconfig)
	}
	config, err := webhook.LoadKubeconfig(kubeconfig, nil)
	if err != nil {
		return nil, err
	}
	w, err := webhook.NewGenericWebhook(audit.Scheme, audit.Codecs, config, []schema.GroupVersion{auditv1.SchemeGroupVersion},
		webhook.DefaultRetryBackoffWithInitialDelay(initialBackoff))
	if err != nil {
		return nil, err
	}
	w.ShouldRetry = func(err error) bool { return err != nil }
	return func(events []*auditinternal.Event) error {
		list := &auditinternal.EventList{Items: make([]auditinternal.Event, 0, len(events))}
		for _, ev := range events {
			list.Items = append(list.Items, *ev)
		}
		ctx := context.Background()
		return w.WithExponentialBackoff(ctx, func() rest.Result {
			return w.RestClient.Post().Body(list).Do(ctx)
		}).Error()
	}, nil
}
