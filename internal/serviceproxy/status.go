package serviceproxy

import (
	"encoding/json"
	"log"
	"net/http"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// writeStatus answers with a Kubernetes Status, as the apiserver does, so kubectl and client-go show the message.
func writeStatus(w http.ResponseWriter, code int, reason metav1.StatusReason, message string) {
	body, _ := json.Marshal(&metav1.Status{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"},
		Status:   metav1.StatusFailure,
		Message:  message,
		Reason:   reason,
		Code:     int32(code),
	})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = w.Write(body)
}

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
