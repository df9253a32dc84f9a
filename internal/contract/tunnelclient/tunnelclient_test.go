package tunnelclient_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/tunnelclient"
)

func TestLatencyChanged(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name               string
		reported, measured time.Duration
		want               bool
	}{
		{"the same", 20 * ms, 20 * ms, false},
		{"jitter on loopback", 2 * ms, 6 * ms, false},
		{"small latencies never report a drop", 3 * ms, 0, false},
		{"double plus the floor", 20 * ms, 45 * ms, false},
		{"more than double plus the floor", 20 * ms, 46 * ms, true},
		{"a slower route", 30 * ms, 300 * ms, true},
		{"half minus the floor", 100 * ms, 48 * ms, false},
		{"less than half minus the floor", 100 * ms, 47 * ms, true},
		{"first report after none", 0, 6 * ms, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			NewWithT(t).Expect(tunnelclient.LatencyChanged(tc.reported, tc.measured)).To(Equal(tc.want))
		})
	}
}
