//go:build bench

package fleet

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"sync/atomic"

	"github.com/go-logr/logr"
	"google.golang.org/grpc/test/bufconn"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/agent"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/tlsreload"
)

// The agents run in a child process, so that the hub's CPU and memory are the parent's alone. Each agent is the
// product's agent with its own certificate; their kube-apiserver is one TLS server (HTTP/2) inside the child,
// reached over in-memory connections, so the child needs one file descriptor per agent, not three (the machine's
// hard limit is 20,000).

// childEnv names the manifest a child process runs the agents of.
const childEnv = "FLEET_CHILD_MANIFEST"

// manifest is what a child runs.
type manifest struct {
	ServerAddress string        `json:"serverAddress"`
	Agents        []agentConfig `json:"agents"`
}

type agentConfig struct {
	Cluster string `json:"cluster"`
	Cert    string `json:"cert"`
	Key     string `json:"key"`
	CA      string `json:"ca"`
}

// childStats is what GET /stats of a child answers.
type childStats struct {
	// Dials and DialErrors count the agents' connection attempts to the proxy-server, and those that failed to
	// connect at TCP level.
	Dials, DialErrors int64
}

// kubeAPIServerAddress is where the agents' kube-apiserver is, for their options; the child's dialer serves it in memory.
const kubeAPIServerAddress = "kube-apiserver.fleet:443"

// runChild runs the manifest's agents until stdin closes; it prints "stats <addr>" first.
func runChild(path string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var m manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return err
	}
	apiserver := bufconn.Listen(64 << 10)
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	ts.Listener, ts.EnableHTTP2 = apiserver, true
	ts.StartTLS()
	defer ts.Close()

	var stats struct{ dials, dialErrors atomic.Int64 }
	netDialer := &net.Dialer{}
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		if addr == kubeAPIServerAddress {
			return apiserver.DialContext(ctx)
		}
		stats.dials.Add(1)
		c, err := netDialer.DialContext(ctx, network, addr)
		if err != nil {
			stats.dialErrors.Add(1)
		}
		return c, err
	}
	statsLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go func() {
		_ = http.Serve(statsLn, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_ = json.NewEncoder(w).Encode(childStats{Dials: stats.dials.Load(), DialErrors: stats.dialErrors.Load()})
		}))
	}()

	ctx, cancel := context.WithCancel(context.Background())
	var running sync.WaitGroup
	for _, a := range m.Agents {
		src, err := tlsreload.New(a.Cert, a.Key, a.CA)
		if err != nil {
			cancel()
			return err
		}
		ag, err := agent.New(agent.Options{
			ServerAddress: m.ServerAddress, AgentID: a.Cluster + "-agent", Identifiers: "host=" + a.Cluster, TLS: src,
			KubeAPIServer: kubeAPIServerAddress, Dial: dial, Log: logr.Discard(),
		})
		if err != nil {
			cancel()
			return err
		}
		running.Go(func() { _ = ag.Run(ctx) })
	}
	fmt.Printf("stats %s\n", statsLn.Addr())
	// The parent ends the child by closing its stdin.
	_, _ = io.Copy(io.Discard, bufio.NewReader(os.Stdin))
	cancel()
	running.Wait()
	return nil
}
