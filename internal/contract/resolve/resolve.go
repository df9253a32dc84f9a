// Package resolve maps host:port to the address actually dialed, like curl's --resolve or a pod's hostAliases. Outside
// a cluster, in-cluster names (the kube-apiserver, proxy-entrypoint.<ns>.svc) do not resolve; local environments
// point them at loopback. The proxy-agent, the manager, the kubectl plugin and pkg/clusterproxy share it.
package resolve

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"
)

// Resolver maps "host:port" (case-insensitive) to the "addr:port" actually dialed.
type Resolver map[string]string

// Parse reads --resolve values, each "host:port=addr:port".
func Parse(values []string) (Resolver, error) {
	r := Resolver{}
	for _, v := range values {
		from, to, ok := strings.Cut(v, "=")
		if !ok {
			return nil, fmt.Errorf("--resolve %q: want host:port=addr:port", v)
		}
		for _, hp := range []string{from, to} {
			host, port, err := net.SplitHostPort(hp)
			if err != nil || host == "" || port == "" {
				return nil, fmt.Errorf("--resolve %q: %q is not host:port", v, hp)
			}
		}
		r[strings.ToLower(from)] = to
	}
	return r, nil
}

// Address is where addr is dialed: its override, or addr itself.
func (r Resolver) Address(addr string) string {
	if to, ok := r[strings.ToLower(addr)]; ok {
		return to
	}
	return addr
}

// DialContext dials addr, or its override, over TCP.
func (r Resolver) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	return d.DialContext(ctx, network, r.Address(addr))
}
