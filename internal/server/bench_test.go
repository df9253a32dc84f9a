package server

import (
	"bufio"
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
)

// BenchmarkNewTunnel compares what one new tunnel with one request costs in process (the user-server's dialer) and
// over the mTLS TCP frontend (a hub client's), with the RSA-2048 certificates the operator's signer issues. Run with
//
//	go test ./internal/server -run '^$' -bench NewTunnel -benchtime 300x
func BenchmarkNewTunnel(b *testing.B) {
	f := startFixture(b, true, nil, nil)
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok"))
	}))
	b.Cleanup(target.Close)
	if _, err := f.agent(b, "c1", "ns1", "agent-1", "host=c1", map[string]string{"c1:443": target.Listener.Addr().String()}); err != nil {
		b.Fatal(err)
	}
	for _, mode := range []struct {
		name string
		d    Dialer
	}{
		{"in-process", f.srv},
		{"mTLS-TCP", &TunnelDialer{Address: f.addrs.Frontend, TLS: f.proxyTL}},
	} {
		b.Run(mode.name, func(b *testing.B) {
			ctx := context.Background()
			for b.Loop() {
				conn, err := mode.d.DialCluster(ctx, "c1", 443)
				if err != nil {
					b.Fatal(err)
				}
				if body, err := get(conn, bufio.NewReader(conn), "c1", "/"); err != nil || body != "ok" {
					b.Fatalf("got %q, %v", body, err)
				}
				_ = conn.Close()
			}
		})
	}
}
