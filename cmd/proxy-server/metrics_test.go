package main

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/metricsdoc"
)

// The proxy-server's /metrics (health port) serves the default registry: its own metrics, the user-server's and
// the aggregated API's, and apiserver-network-proxy's. docs/metrics.md lists exactly those.
func TestDocsListEveryMetricTheProxyServerServes(t *testing.T) {
	metricsdoc.Check(t, "the proxy-server", prometheus.DefaultRegisterer.(*prometheus.Registry))
}
