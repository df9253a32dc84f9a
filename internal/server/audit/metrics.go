package audit

import (
	"github.com/prometheus/client_golang/prometheus"
)

// The values of the sink label.
const (
	sinkLog     = "log"
	sinkWebhook = "webhook"
)

// The values of the result label of cluster_proxy_audit_events_total.
const (
	resultSent    = "sent"
	resultError   = "error"
	resultDropped = "dropped"
)

// The proxy-server serves the default registry; the labels take only the values above.
var (
	eventsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cluster_proxy_audit_events_total",
		Help: "Audit events by sink (log, webhook) and result: sent, error (the sink failed to write or deliver them) or " +
			"dropped (the sink's buffer was full, or the auditor shut down, so they never reached it).",
	}, []string{"sink", "result"})
	sinkUp = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "cluster_proxy_audit_sink_up",
		Help: "1 while an audit sink records events (its last write succeeded), 0 once it failed or dropped one.",
	}, []string{"sink"})
)

func init() {
	prometheus.MustRegister(eventsTotal, sinkUp)
}
