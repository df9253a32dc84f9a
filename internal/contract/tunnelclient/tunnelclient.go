// Package tunnelclient is the hub side of the proxy-server's protocols: a konnectivity tunnel to a managed cluster
// over the gRPC frontend, GET /healthz of a cluster's kube-apiserver through a tunnel, and GET /agents. It holds no
// hub client: pkg/clusterproxy supplies addresses and credentials read from the hub, the proxy-server's own tests
// supply theirs, and both run this code.
package tunnelclient

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	konnectivity "sigs.k8s.io/apiserver-network-proxy/konnectivity-client/pkg/client"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/packet"
)

// KubeAPIServerPort is the tunnel port an agent maps to its cluster's kube-apiserver.
const KubeAPIServerPort = 443

// Frontend is a proxy-server's mTLS gRPC frontend as a hub program reaches it.
type Frontend struct {
	// Address is host:port, e.g. proxy-entrypoint.<ns>.svc:8090.
	Address string
	// TLS presents the proxy-client certificate and verifies the proxy-server.
	TLS *tls.Config
	// Dial opens the TCP connection to Address; nil dials it directly.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Name is how errors name the frontend; empty means Address.
	Name string
	// NoAgentWait is how long DialCluster waits for an agent of the cluster after the attempts that follow at once:
	// 0 means DefaultNoAgentWait, a negative value not at all.
	NoAgentWait time.Duration
}

// DefaultNoAgentWait is Frontend.NoAgentWait's default: the time client-go waits for a cluster through the
// user-server (ten retries a second apart).
const DefaultNoAgentWait = 10 * time.Second

// DialCluster opens a single-use konnectivity tunnel and dials <cluster>:<port> through it, as cluster-gateway and
// clusteradm do; ctx bounds the dial only. Closing the connection ends the tunnel.
//
// Two failures are tried again on a new connection, because behind a Service another attempt reaches another
// replica, and nothing was sent to the cluster:
//   - a refused TCP connection, up to refusedAttempts in all: the endpoint that got it is gone (a killed replica the
//     Service still lists for a moment). Each attempt picks an endpoint at random, so one dead replica of three takes
//     n attempts running with a chance of 1 in 3^n; a refusal costs only a round trip, so there can be many.
//   - a replica without an agent of the cluster ("No agent available"): a new replica is Ready before the agents
//     reach it, and every replica is without the cluster's agents while they reconnect (their forward proxy
//     restarted, their pod replaced). Three attempts follow one another at once, the later ones come after a
//     growing pause up to a second, for up to NoAgentWait (or until ctx ends); then the last error is returned. A
//     cluster no agent serves therefore fails after NoAgentWait.
func (f *Frontend) DialCluster(ctx context.Context, cluster string, port int) (net.Conn, error) {
	refusals, misses := 0, 0
	wait := f.NoAgentWait
	if wait == 0 {
		wait = DefaultNoAgentWait
	}
	var waitingSince time.Time
	for {
		conn, refused, err := f.dialCluster(ctx, cluster, port)
		switch {
		case err == nil || ctx.Err() != nil:
			return conn, err
		case refused:
			if refusals++; refusals == refusedAttempts {
				return nil, err
			}
		case strings.Contains(err.Error(), packet.ErrNoAgent.Error()):
			if misses++; misses <= noAgentRetries {
				continue
			}
			if waitingSince.IsZero() {
				waitingSince = time.Now()
			}
			pause := noAgentPause(misses)
			if time.Since(waitingSince)+pause > wait {
				return nil, err
			}
			select {
			case <-ctx.Done():
				return nil, err
			case <-time.After(pause):
			}
		default:
			return nil, err
		}
	}
}

const (
	// refusedAttempts and noAgentRetries bound DialCluster's attempts (see there).
	refusedAttempts = 8
	noAgentRetries  = 2
)

// noAgentPause is the pause before the attempt after the misses-th "No agent available", once the noAgentRetries
// that follow at once are spent: 250 ms doubling up to a second.
func noAgentPause(misses int) time.Duration {
	return min(250*time.Millisecond<<(misses-noAgentRetries-1), time.Second)
}

// dialCluster is one attempt of DialCluster; refused reports whether the TCP connection to the frontend was refused.
func (f *Frontend) dialCluster(ctx context.Context, cluster string, port int) (_ net.Conn, refused bool, _ error) {
	dial := f.Dial
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	var wasRefused atomic.Bool
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(credentials.NewTLS(f.TLS)),
		// Below the proxy-server's enforcement minimum (5 minutes) the server would close the connection.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Minute}),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			conn, err := dial(ctx, "tcp", addr)
			if errors.Is(err, syscall.ECONNREFUSED) {
				wasRefused.Store(true)
			}
			return conn, err
		}),
	}
	tunnel, err := konnectivity.CreateSingleUseGrpcTunnelWithContext(ctx, context.Background(), f.Address, opts...)
	if err != nil {
		return nil, wasRefused.Load(), fmt.Errorf("tunnel to %s for cluster %s: %w", f.name(), cluster, err)
	}
	conn, err := tunnel.DialContext(ctx, "tcp", net.JoinHostPort(cluster, strconv.Itoa(port)))
	if err != nil {
		return nil, wasRefused.Load(), fmt.Errorf("dial cluster %s port %d through %s: %w", cluster, port, f.name(), err)
	}
	return singleUseConn{conn}, false, nil
}

// tunnelEnded is what konnectivity's connection answers Close with when its tunnel has ended: the cluster closed
// the connection (the tunnel of a single use ends with it), or the frontend went away.
const tunnelEnded = "tunnel closed"

// singleUseConn is the connection of a single-use tunnel. Closing it after its tunnel ended is not an error, as
// closing a TCP connection its peer has closed is not: konnectivity's Close reports the ended tunnel when it sees
// that before the agent's CLOSE_RSP, which is a matter of goroutine scheduling once both have arrived.
type singleUseConn struct{ net.Conn }

func (c singleUseConn) Close() error {
	if err := c.Conn.Close(); err != nil && err.Error() != tunnelEnded {
		return err
	}
	return nil
}

func (f *Frontend) name() string {
	if f.Name != "" {
		return f.Name
	}
	return f.Address
}

// DialClusterFunc opens a connection to port on a managed cluster: Frontend.DialCluster, or the proxy-server's
// in-process dialer.
type DialClusterFunc func(ctx context.Context, cluster string, port int) (net.Conn, error)

// ProbeResult is a GET /healthz sent to a cluster's kube-apiserver through its tunnel.
type ProbeResult struct {
	// Healthy is true when the kube-apiserver answered 200 "ok".
	Healthy bool
	// Latency is how long the whole exchange took, the tunnel's set-up included.
	Latency time.Duration
	// Message says what the kube-apiserver answered instead of "ok".
	Message string
}

// Probe sends GET /healthz to cluster's kube-apiserver through a tunnel opened by dial. The error is set when no
// answer came (no agent connected, the tunnel or the dial failed, ctx ended); an answer other than 200 "ok" is an
// unhealthy result, not an error.
func Probe(ctx context.Context, dial DialClusterFunc, cluster string) (ProbeResult, error) {
	start := time.Now()
	transport := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return dial(ctx, cluster, KubeAPIServerPort)
		},
		// The kube-apiserver's certificate names its own hosts, never the cluster name the tunnel is addressed by, and
		// the hub does not hold the cluster's CA. The tunnel already ends at the agent bound to this cluster's
		// certificate; the probe sends no credentials and reads only the health text.
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}, //nolint:gosec // see above
		DisableKeepAlives: true,
		Proxy:             nil,
	}
	defer transport.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet,
		"https://"+net.JoinHostPort(cluster, strconv.Itoa(KubeAPIServerPort))+"/healthz", nil)
	if err != nil {
		return ProbeResult{}, fmt.Errorf("probe cluster %s: %w", cluster, err)
	}
	resp, err := transport.RoundTrip(req)
	if err != nil {
		return ProbeResult{Latency: time.Since(start)}, fmt.Errorf("probe cluster %s: %w", cluster, err)
	}
	defer func() { _ = resp.Body.Close() }()
	return healthzResult(resp, start, cluster)
}

// ErrNoHealthPort is wrapped by ProbeHealthPort's error when the tunnel health port could not be dialed: no agent,
// or an agent from before the port.
var ErrNoHealthPort = errors.New("cannot dial the tunnel health port")

// ProbeHealthPort sends GET /healthz to the agent's tunnel health port (contract.TunnelHealthPort) through a tunnel
// opened by dial: plain HTTP on a new connection, which the agent answers with its kube-apiserver's /healthz over a
// connection of its own. Results and errors are Probe's.
func ProbeHealthPort(ctx context.Context, dial DialClusterFunc, cluster string) (ProbeResult, error) {
	start := time.Now()
	conn, err := dial(ctx, cluster, contract.TunnelHealthPort)
	if err != nil {
		return ProbeResult{Latency: time.Since(start)}, fmt.Errorf("probe cluster %s: %w: %w", cluster, ErrNoHealthPort, err)
	}
	defer func() { _ = conn.Close() }()
	if d, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(d)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+cluster+"/healthz", nil)
	if err != nil {
		return ProbeResult{}, fmt.Errorf("probe cluster %s: %w", cluster, err)
	}
	req.Close = true
	if err := req.Write(conn); err != nil {
		return ProbeResult{Latency: time.Since(start)}, fmt.Errorf("probe cluster %s: %w", cluster, err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		return ProbeResult{Latency: time.Since(start)}, fmt.Errorf("probe cluster %s: %w", cluster, err)
	}
	defer func() { _ = resp.Body.Close() }()
	return healthzResult(resp, start, cluster)
}

// healthzResult reads a GET /healthz answer, which the caller closes: healthy when it is 200 "ok".
func healthzResult(resp *http.Response, start time.Time, cluster string) (ProbeResult, error) {
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1024))
	result := ProbeResult{Latency: time.Since(start)}
	if err != nil {
		return result, fmt.Errorf("probe cluster %s: read /healthz: %w", cluster, err)
	}
	if resp.StatusCode != http.StatusOK || string(body) != "ok" {
		result.Message = fmt.Sprintf("GET /healthz answered %s: %.100q", resp.Status, body)
		return result, nil
	}
	result.Healthy = true
	return result, nil
}

// agentsView is the body of the proxy-server's GET /agents (docs/data-plane.md, "Connected agents"); the server
// serves it as server.AgentsView, which this package does not import so hub programs do not link the proxy-server.
type agentsView struct {
	Clusters map[string]struct {
		Agents []string `json:"agents"`
	} `json:"clusters"`
}

// ConnectedAgents asks a proxy-server (GET /agents on its HTTP-CONNECT listener; baseURL is like https://host:8094,
// client presents the proxy-client certificate) which agents are connected, and returns their IDs by cluster,
// sorted.
func ConnectedAgents(ctx context.Context, client *http.Client, baseURL string) (map[string][]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, baseURL+"/agents", nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("%s: %s", resp.Status, body)
	}
	var v agentsView
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&v); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	out := make(map[string][]string, len(v.Clusters))
	for cluster, a := range v.Clusters {
		ids := slices.Clone(a.Agents)
		slices.Sort(ids)
		out[cluster] = ids
	}
	return out, nil
}

// TunnelsView is the body of the proxy-server's GET /tunnels (docs/data-plane.md, "Tunnel reports"): what one
// replica holds of each cluster, with the result of the GET /healthz it sent through its own tunnel while answering.
// Asked with the Instance and Generation of its last answer, the replica lists only the clusters that changed since
// (Full false); any other ask gets every cluster with an agent (Full true).
type TunnelsView struct {
	// Instance names the replica's process; a restarted replica has another, and answers in full.
	Instance string `json:"instance"`
	// Generation grows with every change of the replica's reports; ask with it to get what changed after.
	Generation uint64 `json:"generation"`
	// Full is true when Clusters is every cluster with an agent, false when it is what changed since the asked
	// generation: a cluster listed without agents then lost its last one.
	Full     bool                     `json:"full"`
	Clusters map[string]ClusterTunnel `json:"clusters"`
	// Records is the state of the replica's record sinks now, whatever was asked; empty when it records nothing.
	Records []RecordSink `json:"records,omitempty"`
}

// The record sinks a replica reports.
const (
	RecordSinkAuditLog         = "audit-log"
	RecordSinkAuditWebhook     = "audit-webhook"
	RecordSinkSessionRecording = "session-recording"
)

// RecordSink is the state of one of a replica's record sinks: its audit file, its audit webhook, its session
// recordings.
type RecordSink struct {
	Sink string `json:"sink"`
	// Up is false after the sink's last write failed, until one succeeds.
	Up bool `json:"up"`
	// Message says what failed; it names no credential.
	Message string `json:"message,omitempty"`
}

// ClusterTunnel is what a replica holds of one cluster.
type ClusterTunnel struct {
	// Agents are the IDs of the cluster's connected agents, sorted.
	Agents []string `json:"agents"`
	// Probe is the replica's last GET /healthz through the cluster's tunnel; nil until the first has ended.
	Probe *TunnelProbe `json:"probe,omitempty"`
}

// TunnelProbe is a GET /healthz the replica sent through a cluster's tunnel. A replica reports a new one only when it
// differs from the one it reported in a way the status shows (another result, a latency that moved far: see the
// LatencyChanged); a probe that confirms it leaves the report as it was.
type TunnelProbe struct {
	Healthy bool `json:"healthy"`
	// Latency of the request on the tunnel's connection, in microseconds; zero when no answer came.
	LatencyMicros int64 `json:"latencyMicros,omitempty"`
	// Message says why the probe failed.
	Message string `json:"message,omitempty"`
}

// ProbeChanged reports whether next differs from the reported probe in a way the status shows: another result, or
// while healthy a latency latencyChanged counts. Failing again is no change, so the first failure's message stays.
func ProbeChanged(reported, next TunnelProbe, latencyChanged func(reported, measured time.Duration) bool) bool {
	switch {
	case reported.Healthy != next.Healthy:
		return true
	case reported.Healthy:
		return latencyChanged(reported.Latency(), next.Latency())
	default:
		return false
	}
}

// Latency is LatencyMicros as a duration.
func (p TunnelProbe) Latency() time.Duration {
	return time.Duration(p.LatencyMicros) * time.Microsecond
}

// TunnelsCursor is where a caller's view of a replica's reports stands: the Instance and Generation of the last
// answer. The zero cursor asks for everything.
type TunnelsCursor struct {
	Instance   string
	Generation uint64
}

// Tunnels asks a proxy-server (GET /tunnels on its HTTP-CONNECT listener, as ConnectedAgents) to probe every cluster
// it holds through its own tunnels, within probeTimeout each (zero: the replica's default), and to answer what
// changed since cursor.
func Tunnels(ctx context.Context, client *http.Client, baseURL string, cursor TunnelsCursor, probeTimeout time.Duration) (TunnelsView, error) {
	q := url.Values{}
	if probeTimeout > 0 {
		q.Set("timeout", probeTimeout.String())
	}
	if cursor.Instance != "" {
		q.Set("instance", cursor.Instance)
		q.Set("since", strconv.FormatUint(cursor.Generation, 10))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, baseURL+"/tunnels?"+q.Encode(), nil)
	if err != nil {
		return TunnelsView{}, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return TunnelsView{}, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return TunnelsView{}, fmt.Errorf("%s: %s", resp.Status, body)
	}
	var v TunnelsView
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&v); err != nil {
		return TunnelsView{}, fmt.Errorf("decode: %w", err)
	}
	return v, nil
}

// latencyFloor is the change of latency that never counts, however small the latency.
const latencyFloor = 5 * time.Millisecond

// LatencyChanged reports whether a probe's latency moved far enough from the reported one to be reported again:
// more than twice it, or less than half, with moves under 5ms ignored. Jitter stays unreported, a slower route does
// not. The proxy-servers apply it to their probes, the manager to what the replicas report.
func LatencyChanged(reported, measured time.Duration) bool {
	return measured > 2*reported+latencyFloor || 2*measured+latencyFloor < reported
}
