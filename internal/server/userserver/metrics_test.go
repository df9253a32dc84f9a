package userserver

import (
	"testing"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/util/rand"
)

// A cluster's tunnel series exist, at zero, from its first request on: a dashboard's rate of dial failures reads 0
// rather than nothing until the first failure.
func TestAClustersTunnelSeriesStartAtZeroWithItsFirstRequest(t *testing.T) {
	g := NewWithT(t)
	// A name of its own each run: the series are the process's, and go test -count runs this again in it.
	cluster := "metrics-series-at-zero-" + rand.String(8)
	count := func() int {
		return testutil.CollectAndCount(tunnelDialFailures) + testutil.CollectAndCount(tunnelsOpened) + testutil.CollectAndCount(tunnelsOpen)
	}
	before := count()
	p := &pool{maxConns: 1, clusters: map[string]*clusterPool{}}
	p.cluster(cluster)
	g.Expect(count()).To(Equal(before + 3))
	g.Expect(testutil.ToFloat64(tunnelDialFailures.WithLabelValues(cluster))).To(BeZero())
	p.cluster(cluster)
	g.Expect(count()).To(Equal(before+3), "one set of series per cluster")
}
