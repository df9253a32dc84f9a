package clusterproxy

import "github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/resolve"

// Resolver maps "host:port" to the "addr:port" actually dialed, like curl's --resolve. Outside the hub cluster the
// in-cluster Service names (proxy-entrypoint.<ns>.svc) do not resolve; a Resolver points them at a port-forward or a
// local process.
type Resolver = resolve.Resolver

// ParseResolve reads --resolve values, each "host:port=addr:port".
func ParseResolve(values []string) (Resolver, error) { return resolve.Parse(values) }
