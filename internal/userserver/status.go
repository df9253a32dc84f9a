package userserver

import (
	"encoding/json"
	"net/http"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// writeStatus answers like the kube-apiserver does, so kubectl and client-go show the message and classify the error.
func writeStatus(w http.ResponseWriter, code int, reason metav1.StatusReason, message string) {
	body, err := json.Marshal(&metav1.Status{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"},
		Status:   metav1.StatusFailure,
		Message:  message,
		Reason:   reason,
		Code:     int32(code),
	})
	if err != nil { // a Status always marshals; keep the code anyway
		body = nil
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Del("Content-Length")
	w.WriteHeader(code)
	_, _ = w.Write(body)
}
