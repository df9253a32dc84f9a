package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sync"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/util/workqueue"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/pkg/clusterproxy"
)

type healthCommand struct {
	globals
	timeout     time.Duration
	concurrency int
}

func (h *healthCommand) register(fs *flag.FlagSet) {
	fs.DurationVar(&h.timeout, "timeout", 10*time.Second, "how long one probe may take")
	fs.IntVar(&h.concurrency, "concurrency", 8, "probes that run at once")
}

// healthRow is one line of the table, as `clusteradm proxy health` prints it.
type healthRow struct {
	cluster, installed, available, health, latency string
}

func (h *healthCommand) run(ctx context.Context, stdout, stderr io.Writer) error {
	if h.concurrency < 1 {
		return fmt.Errorf("%w: --concurrency must be at least 1", errUsage)
	}
	hub, err := h.hub()
	if err != nil {
		return err
	}
	clusters := &clusterv1.ManagedClusterList{}
	if err := hub.client.List(ctx, clusters); err != nil {
		return hubError(hub.config, fmt.Errorf("list managed clusters: %w", err))
	}
	proxies, err := hub.proxies(ctx, &h.globals)
	if err != nil {
		return err
	}
	// Clusters without a connected agent are not worth a tunnel each; without the list, every cluster is probed.
	connected, err := proxies.ConnectedAgents(ctx)
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "warning: cannot list the connected agents, probing every cluster: %v\n", err)
		connected = nil
	}

	// One List of the add-ons, not one GET per cluster: every ManagedClusterAddOn of the add-on, by cluster namespace.
	addons := &addonv1alpha1.ManagedClusterAddOnList{}
	if err := hub.client.List(ctx, addons, client.MatchingFields{"metadata.name": proxyv1alpha1.AddonName}); err != nil {
		return hubError(hub.config, fmt.Errorf("list the %s add-ons: %w", proxyv1alpha1.AddonName, err))
	}
	byCluster := make(map[string]*addonv1alpha1.ManagedClusterAddOn, len(addons.Items))
	for i := range addons.Items {
		byCluster[addons.Items[i].Namespace] = &addons.Items[i]
	}

	rows := make([]healthRow, len(clusters.Items))
	var stderrMu sync.Mutex
	workqueue.ParallelizeUntil(ctx, max(h.concurrency, 1), len(clusters.Items), func(i int) {
		name := clusters.Items[i].Name
		rows[i] = h.row(ctx, proxies, connected, name, byCluster[name], stderr, &stderrMu)
	})
	if err := ctx.Err(); err != nil {
		return err
	}
	printHealth(stdout, rows)
	return nil
}

// row reports the add-on of one cluster (nil: not installed) and probes its tunnel.
func (h *healthCommand) row(ctx context.Context, proxies *clusterproxy.Client, connected map[string][]string, cluster string,
	mca *addonv1alpha1.ManagedClusterAddOn, stderr io.Writer, stderrMu *sync.Mutex) healthRow {
	row := healthRow{cluster: cluster, installed: "False", available: "False", health: "False", latency: "<none>"}
	if mca != nil {
		row.installed, row.available = "True", "Unknown"
		if a := meta.FindStatusCondition(mca.Status.Conditions, addonv1alpha1.ManagedClusterAddOnConditionAvailable); a != nil {
			row.available = string(a.Status)
		}
	}
	if connected != nil && len(connected[cluster]) == 0 {
		return row // no agent, no tunnel
	}
	probeCtx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	result, err := proxies.Probe(probeCtx, cluster)
	switch {
	case err != nil:
		row.health = "Unknown"
		if errors.Is(err, context.DeadlineExceeded) || probeCtx.Err() != nil {
			row.latency = "<timeout>"
		}
		if connected != nil {
			stderrMu.Lock()
			_, _ = fmt.Fprintf(stderr, "cluster %s: %v\n", cluster, err)
			stderrMu.Unlock()
		}
	case result.Healthy:
		row.health, row.latency = "True", result.Latency.Round(10*time.Microsecond).String()
	default:
		stderrMu.Lock()
		_, _ = fmt.Fprintf(stderr, "cluster %s: %s\n", cluster, result.Message)
		stderrMu.Unlock()
	}
	return row
}

func printHealth(out io.Writer, rows []healthRow) {
	w := tabwriter.NewWriter(out, 4, 8, 4, ' ', 0)
	_, _ = fmt.Fprintln(w, "CLUSTER NAME\tINSTALLED\tAVAILABLE\tPROBED HEALTH\tLATENCY")
	for _, r := range rows {
		_, _ = fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", r.cluster, r.installed, r.available, r.health, r.latency)
	}
	_ = w.Flush()
}
