package agent

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract"
)

func TestTheTunnelHealthPortAnswersTheKubeAPIServersHealthzOverOneKeptConnection(t *testing.T) {
	g := NewWithT(t)
	env := newEnv(t)
	var healthy atomic.Bool
	healthy.Store(true)
	var conns atomic.Int32
	kube := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" || r.Header.Get("Authorization") != "" {
			http.Error(w, "unexpected request", http.StatusTeapot)
			return
		}
		if !healthy.Load() {
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = io.WriteString(w, "[-]etcd failed")
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	kube.EnableHTTP2 = true
	kube.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	kube.StartTLS()
	defer kube.Close()
	env.resolve[kubeName] = kube.Listener.Addr().String()
	opts := env.options(t)
	// Trusts the test server, whose certificate names example.com: the kube-apiserver is verified.
	opts.KubeAPIServerTLS = kube.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	opts.KubeAPIServerTLS.ServerName = "example.com"
	a, _ := runAgent(t, opts)
	waitForTunnel(g, a, 1)
	health := testCluster + ":" + strconv.Itoa(contract.TunnelHealthPort)

	for range 3 {
		g.Expect(env.srv.get(health, "/healthz")).To(Equal("ok"))
	}
	g.Expect(conns.Load()).To(BeEquivalentTo(1), "one connection to the kube-apiserver serves every probe")

	healthy.Store(false)
	_, err := env.srv.get(health, "/healthz")
	var status *statusError
	g.Expect(errors.As(err, &status)).To(BeTrue(), "%v", err)
	g.Expect(status.code).To(Equal(http.StatusInternalServerError))
	g.Expect(status.body).To(Equal("[-]etcd failed"), "the kube-apiserver's answer, as it came")

	_, err = env.srv.get(health, "/version")
	g.Expect(errors.As(err, &status)).To(BeTrue(), "%v", err)
	g.Expect(status.code).To(Equal(http.StatusNotFound), "only /healthz is served")

	kube.CloseClientConnections()
	kube.Close()
	_, err = env.srv.get(health, "/healthz")
	g.Expect(errors.As(err, &status)).To(BeTrue(), "%v", err)
	g.Expect(status.code).To(Equal(http.StatusBadGateway))
	g.Expect(status.body).To(ContainSubstring("the agent cannot reach the kube-apiserver"))
}
