package agent

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// The tunnel health port. A proxy-server probes every cluster it holds, every round (GET /tunnels): if each probe
// went to <cluster>:443, the proxy-server would set up TLS to the kube-apiserver for each, or hold a connection per
// cluster open between rounds (tens of KiB each). Instead the probe is plain HTTP/1.1 to <cluster>:<TunnelHealthPort>,
// served here in process: the agent asks its kube-apiserver's /healthz over one connection it keeps open, and answers
// with what the kube-apiserver answered. The probe still crosses the tunnel both ways and reaches the kube-apiserver;
// the TLS and the kept connection are the managed cluster's.

// healthzTimeout bounds the kube-apiserver's answer when the prober set no deadline.
const healthzTimeout = 10 * time.Second

// healthzHandler answers GET /healthz with the kube-apiserver's GET /healthz, sent with no credential (the
// kube-apiserver lets anybody read it, as the hub's probe always assumed), status and body as they came: 502 when the
// kube-apiserver cannot be reached.
func (a *Agent) healthzHandler() http.Handler {
	kube := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return a.opts.Dial(ctx, "tcp", a.opts.KubeAPIServer)
		},
		TLSClientConfig:     a.kubeTLS(),
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: 1,
		IdleConnTimeout:     5 * time.Minute,
		DisableCompression:  true,
		Proxy:               nil,
	}, Timeout: healthzTimeout}
	url := "https://" + a.opts.KubeAPIServer + "/healthz"
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" || (r.Method != http.MethodGet && r.Method != http.MethodHead) {
			http.NotFound(w, r)
			return
		}
		req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, url, nil)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		resp, err := kube.Do(req)
		if err != nil {
			http.Error(w, fmt.Sprintf("the agent cannot reach the kube-apiserver: %v", err), http.StatusBadGateway)
			return
		}
		defer func() { _ = resp.Body.Close() }()
		body, err := io.ReadAll(io.LimitReader(resp.Body, 1024))
		if err != nil {
			http.Error(w, fmt.Sprintf("the agent cannot read the kube-apiserver's /healthz: %v", err), http.StatusBadGateway)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(body)
	})
}

// kubeTLS verifies the kube-apiserver with Options.KubeAPIServerTLS; without it (tests) the certificate is not
// verified, as the hub's own probe of <cluster>:443 never could.
func (a *Agent) kubeTLS() *tls.Config {
	if a.opts.KubeAPIServerTLS != nil {
		return a.opts.KubeAPIServerTLS.Clone()
	}
	return &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12} //nolint:gosec // see above
}
