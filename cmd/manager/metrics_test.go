package main

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/statemetrics"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/tunnelhealth"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/metricsdoc"
)

// The manager's /metrics serves controller-runtime's registry, with what main adds to it: docs/metrics.md lists
// exactly that.
func TestDocsListEveryMetricTheManagerServes(t *testing.T) {
	registerMetrics(metrics.Registry, statemetrics.New(nil, nil), tunnelhealth.New(tunnelhealth.Options{}))
	metricsdoc.Check(t, "the manager", metrics.Registry.(*prometheus.Registry))
}
