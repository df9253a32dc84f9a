package proxyhttp

import (
	"encoding/base64"
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

func TestTakeWebSocketBearerRemovesEveryTokenProtocolAndReturnsTheFirst(t *testing.T) {
	g := NewWithT(t)
	enc := func(tok string) string {
		return "base64url.bearer.authorization.k8s.io." + base64.RawURLEncoding.EncodeToString([]byte(tok))
	}
	h := http.Header{}
	h.Add("Sec-WebSocket-Protocol", enc("hub-token")+", v5.channel.k8s.io")
	h.Add("Sec-WebSocket-Protocol", "v4.channel.k8s.io, "+enc("second"))
	g.Expect(TakeWebSocketBearer(h)).To(Equal("hub-token"))
	g.Expect(h.Values("Sec-Websocket-Protocol")).To(Equal([]string{"v5.channel.k8s.io, v4.channel.k8s.io"}))

	only := http.Header{"Sec-Websocket-Protocol": {enc("t")}}
	g.Expect(TakeWebSocketBearer(only)).To(Equal("t"))
	g.Expect(only).NotTo(HaveKey("Sec-Websocket-Protocol"), "nothing left to offer")
	g.Expect(TakeWebSocketBearer(http.Header{"Sec-Websocket-Protocol": {"v5.channel.k8s.io"}})).To(BeEmpty())
	bad := http.Header{"Sec-Websocket-Protocol": {"base64url.bearer.authorization.k8s.io.!!!, v5.channel.k8s.io"}}
	g.Expect(TakeWebSocketBearer(bad)).To(BeEmpty())
	g.Expect(bad.Values("Sec-Websocket-Protocol")).To(Equal([]string{"v5.channel.k8s.io"}), "a token that does not decode is still removed")
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
