package clusterproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/tunnelclient"
)

// ProbeResult is a GET /healthz sent to a cluster's kube-apiserver through its tunnel.
type ProbeResult struct {
	// Healthy is true when the kube-apiserver answered 200 "ok".
	Healthy bool
	// Latency is how long the whole exchange took, the tunnel's set-up included.
	Latency time.Duration
	// Message says what the kube-apiserver answered instead of "ok".
	Message string
}

// Probe sends GET /healthz to cluster's kube-apiserver through its tunnel. The error is set when no answer came
// (no agent connected, the tunnel or the dial failed, ctx ended); an answer other than 200 "ok" is an unhealthy
// result, not an error.
func (c *Client) Probe(ctx context.Context, cluster string) (ProbeResult, error) {
	result, err := tunnelclient.Probe(ctx, c.dialCluster, cluster)
	return ProbeResult(result), err
}

// ConnectedAgents asks a proxy-server (GET /agents on its HTTP-CONNECT port, with the proxy-client certificate) which
// agents are connected, and returns their IDs by cluster, sorted.
func (c *Client) ConnectedAgents(ctx context.Context) (map[string][]string, error) {
	host, _, _ := net.SplitHostPort(c.addrs.HTTPConnect)
	tlsCfg, err := c.tlsConfig(ctx, host)
	if err != nil {
		return nil, fmt.Errorf("connected agents: %w", err)
	}
	transport := &http.Transport{DialContext: c.resolve.DialContext, TLSClientConfig: tlsCfg, Proxy: nil}
	defer transport.CloseIdleConnections()
	agents, err := tunnelclient.ConnectedAgents(ctx, &http.Client{Transport: transport}, "https://"+c.addrs.HTTPConnect)
	if err != nil {
		return nil, fmt.Errorf("connected agents from %s: %w", c.describe(c.addrs.HTTPConnect), err)
	}
	return agents, nil
}

// ReplicaAgents asks each proxy-server replica which agents it holds (GET /agents, as ConnectedAgents), and returns
// the answers by replica, as ForEachReplica names them. A replica that does not answer is left out, and named in the
// error when none answers.
func (c *Client) ReplicaAgents(ctx context.Context) (map[string]map[string][]string, error) {
	out := map[string]map[string][]string{}
	var mu sync.Mutex
	err := c.ForEachReplica(ctx, func(ctx context.Context, replica string, client *http.Client, baseURL string) error {
		agents, err := tunnelclient.ConnectedAgents(ctx, client, baseURL)
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		out[replica] = agents
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ForEachReplica calls ask for each proxy-server replica, all at once, with an HTTP client that presents the
// proxy-client certificate to the replica's HTTP-CONNECT listener at baseURL (https://host:port). The replicas are
// the ready endpoints of the proxy-servers' Service, read with the Client's hub reader, and are named by their pod
// (else their address); each is dialed at its own address and verified by the Service's name. Where no endpoint is
// known (a hub without the EndpointSlice controller) or the Service's address is resolved elsewhere
// (Options.Resolve), the Service is asked once, named by its address, and stands for one replica. The error joins
// the failed asks when none succeeded; otherwise it is nil, and the caller knows the failed ones by what ask did not
// record.
func (c *Client) ForEachReplica(ctx context.Context, ask func(ctx context.Context, replica string, client *http.Client, baseURL string) error) error {
	var replicas map[string]string
	if c.resolve.Address(c.addrs.HTTPConnect) == c.addrs.HTTPConnect {
		replicas, _ = c.replicas(ctx) // unknown endpoints: the Service stands for them
	}
	dial := (&net.Dialer{}).DialContext
	if len(replicas) == 0 {
		replicas, dial = map[string]string{c.addrs.HTTPConnect: c.addrs.HTTPConnect}, c.resolve.DialContext
	}
	host, _, _ := net.SplitHostPort(c.addrs.HTTPConnect)
	tlsCfg, err := c.tlsConfig(ctx, host)
	if err != nil {
		return fmt.Errorf("proxy-server replicas: %w", err)
	}
	var (
		mu       sync.Mutex
		errs     []error
		answered int
		asks     sync.WaitGroup
	)
	for name, addr := range replicas {
		asks.Go(func() {
			transport := &http.Transport{DialContext: dial, TLSClientConfig: tlsCfg, Proxy: nil}
			defer transport.CloseIdleConnections()
			err := ask(ctx, name, &http.Client{Transport: transport}, "https://"+addr)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("proxy-server %s: %w", c.replicaName(name, addr), err))
				return
			}
			answered++
		})
	}
	asks.Wait()
	if answered == 0 {
		return errors.Join(errs...)
	}
	return nil
}

// replicaName names a replica in errors: its pod and address, or the Service as describe does.
func (c *Client) replicaName(name, addr string) string {
	if name == c.addrs.HTTPConnect {
		return c.describe(addr)
	}
	return name + " (" + addr + ")"
}

// httpConnectPortName names the HTTP-CONNECT port of the proxy-servers' Service (render.InClusterService).
const httpConnectPortName = "http-connect"

// replicas are the ready endpoints of the proxy-servers' Service on its HTTP-CONNECT port, address by replica name.
func (c *Client) replicas(ctx context.Context) (map[string]string, error) {
	host, port, err := net.SplitHostPort(c.addrs.HTTPConnect)
	if err != nil {
		return nil, err
	}
	service := strings.TrimSuffix(host, "."+c.addrs.Namespace+".svc")
	slices := &discoveryv1.EndpointSliceList{}
	if err := c.creds.reader.List(ctx, slices, client.InNamespace(c.addrs.Namespace),
		client.MatchingLabels{discoveryv1.LabelServiceName: service}); err != nil {
		return nil, fmt.Errorf("the endpoints of Service %s/%s: %w", c.addrs.Namespace, service, err)
	}
	out := map[string]string{}
	for _, s := range slices.Items {
		port := port
		for _, p := range s.Ports {
			if p.Name != nil && *p.Name == httpConnectPortName && p.Port != nil {
				port = strconv.Itoa(int(*p.Port))
			}
		}
		for _, ep := range s.Endpoints {
			if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
				continue
			}
			for _, ip := range ep.Addresses {
				name := ip
				if ep.TargetRef != nil && ep.TargetRef.Name != "" {
					name = ep.TargetRef.Name
				}
				out[name] = net.JoinHostPort(ip, port)
			}
		}
	}
	return out, nil
}
