//go:build e2e

package migrate

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/requestloop"
)

// probe is one kind of the add-on's clients sending its request to one cluster over and over (requestloop), one every
// 250 ms; a retrying one retries a failed request for retryFor before it counts it failed.
type probe struct {
	kind, cluster string
	retrying      bool
	loop          *requestloop.Loop
}

const probeEvery = 250 * time.Millisecond

func startProbe(kind, cluster string, retrying bool, do func(ctx context.Context) error) *probe {
	var budget time.Duration
	if retrying {
		budget = retryFor
	}
	return &probe{kind: kind, cluster: cluster, retrying: retrying, loop: requestloop.Run(do, probeEvery, budget)}
}

// table renders each probe's figures of a phase, one line per client kind and cluster.
func table(phase string, probes []*probe, got map[*probe]requestloop.Figures) string {
	lines := make([]string, 0, len(probes))
	for _, p := range probes {
		f := got[p]
		line := fmt.Sprintf("  %-44s %-12s answered %4d, failed %2d, retried tries %3d, longest unreachable %s",
			p.kind, p.cluster, f.OK, len(f.Failures), f.Retried, f.LongestUnreachable.Round(100*time.Millisecond))
		if n := len(f.Failures); n > 0 {
			line += " (last: " + f.Failures[n-1].Err + ")"
		}
		lines = append(lines, line)
	}
	sort.Strings(lines)
	return phase + ":\n" + strings.Join(lines, "\n")
}
