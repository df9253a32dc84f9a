package serviceproxy

import (
	"log"
	"strings"

	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// logger is the service-proxy's, built once; controller-runtime's delegating logger takes the one the program sets
// later.
var logger = ctrllog.Log.WithName("service-proxy")

// newStdLogger sends what httputil.ReverseProxy logs itself (failures while copying upgraded connections and
// streamed bodies) to the controller-runtime logger.
func newStdLogger() *log.Logger {
	return log.New(logWriter{}, "", 0)
}

type logWriter struct{}

func (logWriter) Write(p []byte) (int, error) {
	logger.Info(strings.TrimSpace(string(p)))
	return len(p), nil
}
