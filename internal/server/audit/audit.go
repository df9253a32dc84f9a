// Package audit records one structured event per request the proxy-server sends to a managed cluster, on every way
// in and whatever the answer, in kube-apiserver's audit.k8s.io/v1 Event format so that the collectors of kube-apiserver
// audit logs take them. What is recorded is decided by an audit Policy as kube-apiserver reads it (levels None,
// Metadata, Request, RequestResponse; rules by users, groups, verbs, resources, namespaces, nonResourceURLs;
// omitStages), and the events go to kube-apiserver's sinks, configured as its flags configure them: a rotated log
// file (--audit-log-*) and a webhook named by a kubeconfig (--audit-webhook-*), each in batch, blocking or
// blocking-strict mode.
//
// The event describes the request to the managed kube-apiserver (its verb, object or non-resource path, as that
// kube-apiserver parses it) made by the hub user, with annotations naming the cluster, the way in and this replica.
// No credential is ever recorded: not a header but User-Agent is read into it, credential-looking query parameters
// are removed from its RequestURI, and a request body is kept only when the policy asks for it (level Request and
// above; RequestResponse records no more than Request: answers pass through the proxy-server unread, and
// omitManagedFields has nothing to act on for the same reason).
//
// The pieces are k8s.io/apiserver's: the policy reader and evaluator, RequestInfoFactory, the log and buffered
// backends, and the webhook client. Its AuditOptions.ApplyTo is not used, as it records nothing without a policy file
// and hands back the backends already wrapped, where the sinks' failures could not be counted.
package audit

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	"k8s.io/apiserver/pkg/audit"
	"k8s.io/apiserver/pkg/audit/policy"
	"k8s.io/apiserver/plugin/pkg/audit/buffered"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// The modes of a sink, as kube-apiserver's --audit-log-mode and --audit-webhook-mode name them.
const (
	// ModeBatch buffers events and writes them in the background, in batches (the webhook's default). A full
	// buffer drops events, counted.
	ModeBatch = "batch"
	// ModeBlocking writes each event before the request's Begin or Complete returns (the log's default); a failure
	// is counted and the request goes on.
	ModeBlocking = "blocking"
	// ModeBlockingStrict is ModeBlocking, and a request is refused while the sink is down: see Entry.Admit.
	ModeBlockingStrict = "blocking-strict"
)

// kube-apiserver's defaults (k8s.io/apiserver/pkg/server/options.NewAuditOptions).
const (
	DefaultLogMaxAge             = 366
	DefaultLogMaxBackups         = 100
	DefaultLogMaxSize            = 100
	DefaultWebhookInitialBackoff = 10 * time.Second
)

// DefaultLogBatch is kube-apiserver's batch configuration of the log sink: batching does not help a file.
func DefaultLogBatch() buffered.BatchConfig {
	return buffered.BatchConfig{BufferSize: 10000, MaxBatchSize: 1}
}

// DefaultWebhookBatch is kube-apiserver's batch configuration of the webhook sink.
func DefaultWebhookBatch() buffered.BatchConfig {
	return buffered.BatchConfig{
		BufferSize:     10000,
		MaxBatchSize:   400,
		MaxBatchWait:   30 * time.Second,
		ThrottleEnable: true,
		ThrottleQPS:    10,
		ThrottleBurst:  15,
		AsyncDelegate:  true,
	}
}

// Options configure an Auditor as kube-apiserver's audit flags configure its own; New names the flag of a wrong one.
// The zero value records nothing anywhere: set LogPath, WebhookKubeconfig or both.
type Options struct {
	// PolicyFile (--audit-policy-file) is an audit.k8s.io/v1 Policy. "" records every request at Metadata level,
	// at stage ResponseComplete only: one event a request.
	PolicyFile string

	// LogPath (--audit-log-path) is the file events are appended to, one JSON object a line; "-" is standard
	// output, "" no log sink.
	LogPath string
	// LogMaxAge (days), LogMaxBackups (files) and LogMaxSize (MiB) rotate the file as --audit-log-maxage,
	// --audit-log-maxbackup and --audit-log-maxsize do: 0 keeps rotated files of any age, keeps every rotated file,
	// and does not rotate, respectively. NewOptions has kube-apiserver's defaults.
	LogMaxAge, LogMaxBackups, LogMaxSize int
	// LogCompress (--audit-log-compress) gzips rotated files.
	LogCompress bool
	// LogMode (--audit-log-mode) is ModeBlocking when empty, as kube-apiserver's.
	LogMode string
	// LogBatch (--audit-log-batch-*) configures ModeBatch; nil is DefaultLogBatch.
	LogBatch *buffered.BatchConfig

	// WebhookKubeconfig (--audit-webhook-config-file) names, as a kubeconfig, the server events are POSTed to as
	// audit.k8s.io/v1 EventLists, and how to authenticate to it; "" no webhook sink.
	WebhookKubeconfig string
	// WebhookMode (--audit-webhook-mode) is ModeBatch when empty, as kube-apiserver's.
	WebhookMode string
	// WebhookInitialBackoff (--audit-webhook-initial-backoff) is the wait before the first retry of a failed POST;
	// later waits grow 1.5 times, five tries in all. 0 is DefaultWebhookInitialBackoff.
	WebhookInitialBackoff time.Duration
	// WebhookBatch (--audit-webhook-batch-*) configures ModeBatch; nil is DefaultWebhookBatch.
	WebhookBatch *buffered.BatchConfig

	// Replica is this proxy-server replica's ID, recorded in every event.
	Replica string
	// Clock stamps the events that come without times, and times the sinks' health; default the real clock.
	Clock clock.PassiveClock
}

// NewOptions are kube-apiserver's defaults: a log sink rotates at 100 MiB, keeps 100 files for 366 days, and blocks;
// a webhook sink batches.
func NewOptions() Options {
	return Options{
		LogMaxAge:             DefaultLogMaxAge,
		LogMaxBackups:         DefaultLogMaxBackups,
		LogMaxSize:            DefaultLogMaxSize,
		LogMode:               ModeBlocking,
		WebhookMode:           ModeBatch,
		WebhookInitialBackoff: DefaultWebhookInitialBackoff,
	}
}

// Auditor records the events of requests to managed clusters. A nil *Auditor records nothing.
type Auditor struct {
	policy  audit.PolicyRuleEvaluator
	sinks   []*sink
	strict  bool // a sink is blocking-strict
	replica string
	clock   clock.PassiveClock
	logger  atomic.Pointer[logr.Logger]

	stop     chan struct{}
	runOnce  sync.Once
	stopOnce sync.Once
	running  atomic.Bool
}

// SinkHealth is what an Auditor knows of one of its sinks, for a status condition.
type SinkHealth struct {
	// Sink is "log" or "webhook".
	Sink string
	// Mode is the sink's mode: ModeBatch, ModeBlocking or ModeBlockingStrict.
	Mode string
	// Up is true until the sink fails to record an event (a write or a delivery failed, or its buffer was full),
	// and again once it records one.
	Up bool
	// LastError says why the sink is down, without credentials; "" while it is up.
	LastError string
	// Since is when Up last changed, or when the Auditor was made.
	Since time.Time
}

// testHooks replace what tests cannot make happen for real.
type testHooks struct {
	// logWriter, when set, is the log sink's file.
	logWriter io.Writer
}

// New checks o, reads the policy, opens the log file and reads the webhook's kubeconfig. An error names the flag of
// the option that is wrong ("--audit-policy-file: ..."). Call Run before the first request and Shutdown after the
// last.
func New(o Options) (*Auditor, error) {
	return newAuditor(o, testHooks{})
}

func newAuditor(o Options, hooks testHooks) (*Auditor, error) {
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.LogMode == "" {
		o.LogMode = ModeBlocking
	}
	if o.WebhookMode == "" {
		o.WebhookMode = ModeBatch
	}
	if o.WebhookInitialBackoff <= 0 {
		o.WebhookInitialBackoff = DefaultWebhookInitialBackoff
	}
	logBatch, webhookBatch := DefaultLogBatch(), DefaultWebhookBatch()
	if o.LogBatch != nil {
		logBatch = *o.LogBatch
	}
	if o.WebhookBatch != nil {
		webhookBatch = *o.WebhookBatch
	}
	logOn := o.LogPath != "" || hooks.logWriter != nil
	if err := validate(o, logOn, logBatch, webhookBatch); err != nil {
		return nil, err
	}

	a := &Auditor{replica: o.Replica, clock: o.Clock, stop: make(chan struct{})}
	background := klog.Background()
	a.logger.Store(&background)
	logger := func() logr.Logger { return *a.logger.Load() }

	if o.PolicyFile == "" {
		a.policy = policy.NewFakePolicyRuleEvaluator(auditinternal.LevelMetadata,
			[]auditinternal.Stage{auditinternal.StageRequestReceived, auditinternal.StageResponseStarted})
	} else {
		p, err := policy.LoadPolicyFromFile(o.PolicyFile)
		if err != nil {
			return nil, fmt.Errorf("--audit-policy-file: %w", err)
		}
		a.policy = policy.NewPolicyRuleEvaluator(p)
	}

	if logOn {
		w, closer := hooks.logWriter, io.Closer(nil)
		if w == nil {
			var err error
			if w, closer, err = openLog(o); err != nil {
				return nil, fmt.Errorf("--audit-log-path: %w", err)
			}
		}
		s := newSink(sinkLog, o.LogMode, logBatch, logDelivery(w), o.Clock, logger)
		s.closer = closer
		a.sinks = append(a.sinks, s)
	}
	if o.WebhookKubeconfig != "" {
		deliver, err := webhookDelivery(o.WebhookKubeconfig, o.WebhookInitialBackoff)
		if err != nil {
			a.closeFiles()
			return nil, fmt.Errorf("--audit-webhook-config-file: %w", err)
		}
		a.sinks = append(a.sinks, newSink(sinkWebhook, o.WebhookMode, webhookBatch, deliver, o.Clock, logger))
	}
	for _, s := range a.sinks {
		a.strict = a.strict || s.mode == ModeBlockingStrict
	}
	return a, nil
}

func validate(o Options, logOn bool, logBatch, webhookBatch buffered.BatchConfig) error {
	if logOn {
		if err := validateMode("log", o.LogMode, logBatch); err != nil {
			return err
		}
		for _, f := range []struct {
			flag  string
			value int
		}{{"--audit-log-maxage", o.LogMaxAge}, {"--audit-log-maxbackup", o.LogMaxBackups}, {"--audit-log-maxsize", o.LogMaxSize}} {
			if f.value < 0 {
				return fmt.Errorf("%s: %d is negative", f.flag, f.value)
			}
		}
	}
	if o.WebhookKubeconfig != "" {
		if err := validateMode("webhook", o.WebhookMode, webhookBatch); err != nil {
			return err
		}
	}
	return nil
}

func validateMode(plugin, mode string, batch buffered.BatchConfig) error {
	switch mode {
	case ModeBlocking, ModeBlockingStrict:
		return nil
	case ModeBatch:
	default:
		return fmt.Errorf("--audit-%s-mode: unknown mode %q, want one of %s", plugin, mode,
			strings.Join([]string{ModeBatch, ModeBlocking, ModeBlockingStrict}, ", "))
	}
	switch {
	case batch.BufferSize <= 0:
		return fmt.Errorf("--audit-%s-batch-buffer-size: %d is not positive", plugin, batch.BufferSize)
	case batch.MaxBatchSize <= 0:
		return fmt.Errorf("--audit-%s-batch-max-size: %d is not positive", plugin, batch.MaxBatchSize)
	case batch.MaxBatchSize > 1 && batch.MaxBatchWait <= 0:
		return fmt.Errorf("--audit-%s-batch-max-wait: %s is not positive", plugin, batch.MaxBatchWait)
	case batch.ThrottleEnable && batch.ThrottleQPS <= 0:
		return fmt.Errorf("--audit-%s-batch-throttle-qps: %v is not positive", plugin, batch.ThrottleQPS)
	case batch.ThrottleEnable && batch.ThrottleBurst <= 0:
		return fmt.Errorf("--audit-%s-batch-throttle-burst: %d is not positive", plugin, batch.ThrottleBurst)
	}
	return nil
}

// Run starts the sinks that write in the background (batch mode), and logs their failures with ctx's logger. ctx's
// end does not stop them: requests still draining after it are recorded until Shutdown. Call it once, before the
// first request; events of batch sinks wait in their buffers until then.
func (a *Auditor) Run(ctx context.Context) {
	if a == nil {
		return
	}
	a.runOnce.Do(func() {
		logger := klog.FromContext(ctx).WithName("audit")
		a.logger.Store(&logger)
		for _, s := range a.sinks {
			// Both backends' Run only start goroutines and return nil.
			_ = s.send.Run(a.stop)
		}
		a.running.Store(true)
	})
}

// Shutdown stops the sinks once they have written what they hold (a webhook that is down is retried, up to its
// backoff's end), and closes the log file. Call it after the servers drained: later events are dropped, counted.
func (a *Auditor) Shutdown() {
	if a == nil {
		return
	}
	a.stopOnce.Do(func() {
		for _, s := range a.sinks {
			s.closed.Store(true)
		}
		close(a.stop)
		for _, s := range a.sinks {
			if s.mode != ModeBatch || a.running.Load() {
				s.send.Shutdown()
			} else if n := s.held.Swap(0); n > 0 {
				s.drop(int(n), "the auditor shut down before it ran")
			}
		}
		a.closeFiles()
	})
}

func (a *Auditor) closeFiles() {
	for _, s := range a.sinks {
		if s.closer != nil {
			if err := s.closer.Close(); err != nil {
				a.logger.Load().Error(err, "Cannot close the audit log", "sink", s.name)
			}
		}
	}
}

// Health is what is known of each sink, the log's first.
func (a *Auditor) Health() []SinkHealth {
	if a == nil {
		return nil
	}
	h := make([]SinkHealth, 0, len(a.sinks))
	for _, s := range a.sinks {
		h = append(h, s.health())
	}
	return h
}

// process hands ev to every sink and returns the first blocking-strict sink that did not record it, or nil.
func (a *Auditor) process(ev *auditinternal.Event) *sink {
	var failed *sink
	for _, s := range a.sinks {
		if !s.process(ev) && s.mode == ModeBlockingStrict && failed == nil {
			failed = s
		}
	}
	return failed
}
