package proxyhttp

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestBearerToken(t *testing.T) {
	g := NewWithT(t)
	for value, want := range map[string]string{
		"Bearer abc":     "abc",
		"bearer abc":     "abc",
		" Bearer abc ":   "abc",
		"Bearer abc def": "abc",
		"Bearer  abc":    "",
		"Bearer ":        "",
		"Bearer":         "",
		"Basic abc":      "",
		"":               "",
	} {
		h := http.Header{}
		if value != "" {
			h.Set("Authorization", value)
		}
		g.Expect(BearerToken(h)).To(Equal(want), "Authorization %q", value)
	}
}

func TestWriteStatusAnswersAKubernetesStatus(t *testing.T) {
	g := NewWithT(t)
	w := httptest.NewRecorder()
	w.Header().Set("Content-Length", "99")
	WriteStatus(w, http.StatusForbidden, metav1.StatusReasonForbidden, "not allowed")
	g.Expect(w.Code).To(Equal(http.StatusForbidden))
	g.Expect(w.Header().Get("Content-Type")).To(Equal("application/json"))
	g.Expect(w.Header().Get("Content-Length")).To(BeEmpty())
	var st metav1.Status
	g.Expect(json.Unmarshal(w.Body.Bytes(), &st)).To(Succeed())
	g.Expect(st).To(Equal(metav1.Status{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"},
		Status: metav1.StatusFailure, Message: "not allowed", Reason: metav1.StatusReasonForbidden, Code: http.StatusForbidden}))
}
