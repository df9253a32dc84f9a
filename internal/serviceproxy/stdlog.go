package serviceproxy

import (
	"log"
	"strings"

	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// newStdLogger sends what httputil.ReverseProxy logs itself (failures while copying upgraded connections and
// streamed bodies) to the controller-runtime logger.
func newStdLogger() *log.Logger {
	return log.New(logWriter{}, "", 0)
}

type logWriter struct{}

func (logWriter) Write(p []byte) (int, error) {
	ctrllog.Log.WithName("service-proxy").Info(strings.TrimSpace(string(p)))
	return len(p), nil
}
