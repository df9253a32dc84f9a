package main

import (
	"testing"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/agent"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/metricsdoc"
)

// The agent's /metrics serves its own registry: docs/metrics.md lists exactly what it holds.
func TestDocsListEveryMetricTheAgentServes(t *testing.T) {
	metricsdoc.Check(t, "the proxy-agent", agent.MetricsDescriber())
}
