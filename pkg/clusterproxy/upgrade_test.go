package clusterproxy_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	gwebsocket "github.com/gorilla/websocket"
	. "github.com/onsi/gomega"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport/spdy"
	"k8s.io/client-go/transport/websocket"
	"k8s.io/streaming/pkg/httpstream"
	streamspdy "k8s.io/streaming/pkg/httpstream/spdy"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/certs"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/tunneltest"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/pkg/clusterproxy"
)

// echoServer is a stand-in kube-apiserver that upgrades /spdy to SPDY and /ws to a websocket, as the kube-apiserver
// does for exec and port-forward, and echoes every stream; it counts the upgrades it served.
func echoServer(t *testing.T) (addr string, caPEM []byte, upgrades *int) {
	t.Helper()
	served := 0
	mux := http.NewServeMux()
	mux.HandleFunc("/spdy", func(w http.ResponseWriter, r *http.Request) {
		if _, err := httpstream.Handshake(r, w, []string{"echo.v1"}); err != nil {
			return
		}
		conn := streamspdy.NewResponseUpgrader().UpgradeResponse(w, r, func(s httpstream.Stream, _ <-chan struct{}) error {
			go func() {
				_, _ = io.Copy(s, s)
				s.Close()
			}()
			return nil
		})
		if conn == nil {
			return
		}
		served++
		<-conn.CloseChan()
	})
	mux.HandleFunc("/ws", func(w http.ResponseWriter, r *http.Request) {
		up := gwebsocket.Upgrader{Subprotocols: []string{"echo.v1"}}
		conn, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		served++
		defer func() { _ = conn.Close() }()
		for {
			kind, data, err := conn.ReadMessage()
			if err != nil {
				return
			}
			if err := conn.WriteMessage(kind, data); err != nil {
				return
			}
		}
	})
	ts := httptest.NewTLSServer(mux)
	t.Cleanup(ts.Close)
	return ts.Listener.Addr().String(), certs.EncodeBundle(ts.Certificate()), &served
}

// echoCluster is cluster c1 behind a tunnel, its kube-apiserver an echoServer, and RESTConfig's config for it.
func echoCluster(t *testing.T) (*clusterproxy.Client, *rest.Config, *int) {
	t.Helper()
	hub := tunneltest.Start(t, "proxy-ns")
	api, ca, upgrades := echoServer(t)
	hub.StartAgent(t, "c1", api)
	proxies, err := clusterproxy.New(context.Background(), nil, clusterproxy.Options{Reader: hub.Reader(), Resolve: hub.Resolve})
	if err != nil {
		t.Fatal(err)
	}
	// Nothing listens on 127.0.0.1:6443: only the tunnel can answer.
	cfg, err := proxies.RESTConfig("c1", &rest.Config{Host: "https://127.0.0.1:6443", TLSClientConfig: rest.TLSClientConfig{CAData: ca}})
	if err != nil {
		t.Fatal(err)
	}
	return proxies, cfg, upgrades
}

// client-go's SPDY and websocket round trippers (exec, attach, port-forward) ignore rest.Config.Dial; RESTConfig
// must still carry them through the tunnel.
func TestRESTConfigCarriesSPDYAndWebsocketUpgradesThroughTheTunnel(t *testing.T) {
	g := NewWithT(t)
	proxies, cfg, upgrades := echoCluster(t)
	ca := cfg.CAData

	t.Run("SPDY", func(t *testing.T) {
		g := NewWithT(t)
		rt, upgrader, err := spdy.RoundTripperFor(cfg)
		g.Expect(err).NotTo(HaveOccurred())
		u, _ := url.Parse(cfg.Host + "/spdy")
		conn, protocol, err := spdy.NewDialerForStreaming(upgrader, &http.Client{Transport: rt}, http.MethodPost, u).Dial("echo.v1")
		g.Expect(err).NotTo(HaveOccurred())
		defer func() { _ = conn.Close() }()
		g.Expect(protocol).To(Equal("echo.v1"))
		stream, err := conn.CreateStream(http.Header{})
		g.Expect(err).NotTo(HaveOccurred())
		_, err = stream.Write([]byte("through the tunnel"))
		g.Expect(err).NotTo(HaveOccurred())
		got := make([]byte, len("through the tunnel"))
		_, err = io.ReadFull(stream, got)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(string(got)).To(Equal("through the tunnel"))
	})

	t.Run("websocket", func(t *testing.T) {
		g := NewWithT(t)
		rt, holder, err := websocket.RoundTripperFor(cfg)
		g.Expect(err).NotTo(HaveOccurred())
		req, err := http.NewRequest(http.MethodGet, cfg.Host+"/ws", nil)
		g.Expect(err).NotTo(HaveOccurred())
		conn, err := websocket.Negotiate(rt, holder, req, "echo.v1")
		g.Expect(err).NotTo(HaveOccurred())
		defer func() { _ = conn.Close() }()
		g.Expect(conn.WriteMessage(gwebsocket.BinaryMessage, []byte("through the tunnel"))).To(Succeed())
		_, got, err := conn.ReadMessage()
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(string(got)).To(Equal("through the tunnel"))
	})
	g.Expect(*upgrades).To(Equal(2))

	t.Run("an upgrade to a cluster without an agent fails at once, naming the cluster", func(t *testing.T) {
		g := NewWithT(t)
		cfg, err := proxies.RESTConfig("nowhere", &rest.Config{Host: "https://127.0.0.1:6443", TLSClientConfig: rest.TLSClientConfig{CAData: ca}})
		g.Expect(err).NotTo(HaveOccurred())
		rt, holder, err := websocket.RoundTripperFor(cfg)
		g.Expect(err).NotTo(HaveOccurred())
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, cfg.Host+"/ws", nil)
		g.Expect(err).NotTo(HaveOccurred())
		_, err = websocket.Negotiate(rt, holder, req, "echo.v1")
		g.Expect(err).To(MatchError(ContainSubstring("nowhere")))
		g.Expect(ctx.Err()).NotTo(HaveOccurred(), "it failed before the deadline")
	})
}

// The proxy RESTConfig gives an upgrade request serves only a CONNECT with the credential made for that request.
func TestUpgradeProxyRefusesAConnectWithoutItsCredential(t *testing.T) {
	g := NewWithT(t)
	_, cfg, _ := echoCluster(t)

	plain, _ := http.NewRequest(http.MethodGet, cfg.Host+"/version", nil)
	g.Expect(cfg.Proxy(plain)).To(BeNil(), "a request that is no upgrade goes through Dial")

	upgrade, _ := http.NewRequest(http.MethodGet, cfg.Host+"/ws", nil)
	upgrade.Header.Set("Upgrade", "websocket")
	proxyURL, err := cfg.Proxy(upgrade)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(proxyURL.Hostname()).To(Equal("127.0.0.1"))
	password, _ := proxyURL.User.Password()
	g.Expect(password).NotTo(BeEmpty())

	// A client without the credential: 407, and the proxy, which serves one connection, is gone.
	resp, err := (&http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: proxyURL.Host})}}).
		Get("https://127.0.0.1:6443/version")
	if err == nil {
		resp.Body.Close()
	}
	g.Expect(err).To(MatchError(ContainSubstring("credential of this upgrade request's proxy is missing or wrong")))
	resp, err = (&http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL)}}).Get("https://127.0.0.1:6443/version")
	if err == nil {
		resp.Body.Close()
	}
	g.Expect(err).To(HaveOccurred())
	g.Expect(strings.Contains(err.Error(), "connection refused")).To(BeTrue(), "%v", err)
}
