//go:build bench

package agent

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	anpagent "sigs.k8s.io/apiserver-network-proxy/pkg/agent"
)

// BenchmarkBulkDownload moves /bulk (16 MiB) over one kept-alive connection per mode, all in one process: direct
// over loopback, through a raw ANP tunnel served by ANP's own agent (4 KiB reads), and through a tunnel served by this
// agent to the kube-apiserver port and to the in-process service-proxy port. Compare ratios within one run only.
// cpu-ms/op is the whole process's CPU per transfer. Run with
//
//	go test -tags bench ./internal/agent -run XXX -bench BulkDownload -benchtime 20x -count 3
func BenchmarkBulkDownload(b *testing.B) {
	env := newEnv(b)
	opts := env.options(b)
	opts.Log = logr.Discard()
	a, err := New(opts)
	must(b, err)
	run(b, a)
	// The same agent sending 64 KiB DATA packets, to show why packets stay under 32 KiB.
	opts.Identifiers = "host=c2"
	big, err := New(opts)
	must(b, err)
	big.packetSize = 64 << 10
	run(b, big)
	stopANP := runANPAgent(b, env)
	defer stopANP()
	for a.Tunnels() == 0 || big.Tunnels() == 0 {
		time.Sleep(time.Millisecond)
	}
	target := env.target.Listener.Addr().String()

	modes := []struct {
		name, address string
		dial          func(ctx context.Context, address string) (net.Conn, error)
	}{
		{"direct", target, func(ctx context.Context, address string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "tcp", address)
		}},
		{"anp-agent", target, env.srv.dial},
		{"agent-kube-apiserver", clusterAddress, env.srv.dial},
		{"agent-service-proxy", testCluster + ":7443", env.srv.dial},
		{"agent-kube-apiserver-64KiB-packets", "c2:443", env.srv.dial},
	}
	for _, m := range modes {
		b.Run(m.name, func(b *testing.B) {
			var conn net.Conn
			for conn == nil {
				if conn, err = m.dial(b.Context(), m.address); err != nil {
					time.Sleep(10 * time.Millisecond) // ANP's agent may still be connecting
				}
			}
			client := &http.Client{Transport: &http.Transport{DialContext: func(context.Context, string, string) (net.Conn, error) { return conn, nil }}}
			defer client.CloseIdleConnections()
			get := func() {
				resp, err := client.Get("http://" + m.address + "/bulk")
				must(b, err)
				n, _ := io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				if n != bulkSize {
					b.Fatalf("got %d bytes", n)
				}
			}
			get() // warm up
			b.SetBytes(bulkSize)
			cpu := cpuTime()
			for b.Loop() {
				get()
			}
			b.ReportMetric(float64((cpuTime()-cpu).Milliseconds())/float64(b.N), "cpu-ms/op")
		})
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// runANPAgent runs ANP's own agent (the baseline) against env's server with the ANP binary's defaults; it serves
// dials to 127.0.0.1.
func runANPAgent(b *testing.B, env *testEnv) (stop func()) {
	cert, err := tls.LoadX509KeyPair(env.certFile, env.keyFile)
	must(b, err)
	tlsCfg := &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: env.pki.pool, MinVersion: tls.VersionTLS12}
	stopCh := make(chan struct{})
	cs := (&anpagent.ClientSetConfig{
		Address:           env.srv.agentLis.Addr().String(),
		AgentID:           "anp-agent",
		AgentIdentifiers:  "ipv4=127.0.0.1",
		SyncInterval:      time.Second,
		ProbeInterval:     time.Second,
		SyncIntervalCap:   10 * time.Second,
		XfrChannelSize:    150,
		ServerCountSource: "default",
		DialOptions: []grpc.DialOption{
			grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)),
			grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: time.Hour, PermitWithoutStream: true}),
		},
	}).NewAgentClientSet(make(chan struct{}), stopCh)
	cs.SetServerCounter(anpagent.NewResponseBasedCounter(cs))
	cs.Serve()
	return func() { close(stopCh) }
}
