package sessionrec

import (
	"github.com/prometheus/client_golang/prometheus"
)

// The results of a session's recording, the values of the result label.
const (
	resultRecorded     = "recorded"
	resultRefused      = "refused"
	resultFailedOpen   = "failed_open"
	resultFailedClosed = "failed_closed"
)

// The proxy-server serves the default registry.
var (
	recordings = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cluster_proxy_session_recordings_total",
		Help: "Exec and attach sessions meant to be recorded, by result: recorded to the end; refused because the " +
			"recording could not be opened and recording fails closed; failed_open when the recording stopped and the " +
			"session went on unrecorded; failed_closed when the recording failed and the session was cut.",
	}, []string{"result"})
	recordingBytes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "cluster_proxy_session_recording_bytes_total",
		Help: "Bytes written to session recordings.",
	})
	sinkUp = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "cluster_proxy_session_recording_sink_up",
		Help: "1 when the last recording opened or written succeeded, 0 after a failure.",
	})
)

func init() {
	prometheus.MustRegister(recordings, recordingBytes, sinkUp)
	// Every result's series exists from the start, so that the first of each counts in an increase.
	for _, result := range []string{resultRecorded, resultRefused, resultFailedOpen, resultFailedClosed} {
		recordings.WithLabelValues(result)
	}
}
