package system

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
)

// ClusterState is one cluster's view from the hub.
type ClusterState struct {
	Name string
	// Status is the ClusterProxyStatus conditions as "Type=Status(Reason)", in a fixed order.
	Status string
	// AddOnAvailable is the ManagedClusterAddOn's Available condition status.
	AddOnAvailable metav1.ConditionStatus
	Available      bool
}

// States reads every cluster's ClusterProxyStatus and ManagedClusterAddOn.
func (s *System) States(ctx context.Context) ([]ClusterState, error) {
	var out []ClusterState
	for _, c := range s.Env.Clusters {
		st := ClusterState{Name: c.Name, AddOnAvailable: metav1.ConditionUnknown}
		cps := &proxyv1alpha1.ClusterProxyStatus{}
		switch err := s.HubClient.Get(ctx, client.ObjectKey{Namespace: c.Name, Name: proxyv1alpha1.AddonName}, cps); {
		case err == nil:
			var parts []string
			for _, t := range []string{proxyv1alpha1.ConditionAgentDeployed, proxyv1alpha1.ConditionCertificateReady,
				proxyv1alpha1.ConditionAgentConnected, proxyv1alpha1.ConditionTunnelHealthy, proxyv1alpha1.ConditionAvailable} {
				if cond := meta.FindStatusCondition(cps.Status.Conditions, t); cond != nil {
					parts = append(parts, fmt.Sprintf("%s=%s(%s)", t, cond.Status, cond.Reason))
				}
			}
			st.Status = strings.Join(parts, " ")
			st.Available = meta.IsStatusConditionTrue(cps.Status.Conditions, proxyv1alpha1.ConditionAvailable)
		case client.IgnoreNotFound(err) == nil:
			st.Status = "no ClusterProxyStatus yet"
		default:
			return nil, err
		}
		mca := &addonv1alpha1.ManagedClusterAddOn{}
		if err := s.HubClient.Get(ctx, client.ObjectKey{Namespace: c.Name, Name: proxyv1alpha1.AddonName}, mca); client.IgnoreNotFound(err) != nil {
			return nil, err
		}
		if cond := meta.FindStatusCondition(mca.Status.Conditions, addonv1alpha1.ManagedClusterAddOnConditionAvailable); cond != nil {
			st.AddOnAvailable = cond.Status
		}
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// waitAvailable polls the hub (once a second, printing what changed) until every cluster's ClusterProxyStatus and
// ManagedClusterAddOn are Available.
func (s *System) waitAvailable(ctx context.Context) error {
	deadline := time.Now().Add(s.opts.ReadyTimeout)
	last := map[string]string{}
	for {
		if err := s.checkProcesses(); err != nil {
			return err
		}
		states, err := s.States(ctx)
		if err != nil {
			return err
		}
		ready := true
		for _, st := range states {
			line := fmt.Sprintf("%s; ManagedClusterAddOn Available=%s", st.Status, st.AddOnAvailable)
			if last[st.Name] != line {
				fmt.Fprintf(s.opts.Log, "    %s: %s\n", st.Name, line)
				last[st.Name] = line
			}
			ready = ready && st.Available && st.AddOnAvailable == metav1.ConditionTrue
		}
		if ready {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not every cluster is Available after %s; logs are in %s", s.opts.ReadyTimeout, s.opts.WorkDir)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second): // a person watches this: once a second is enough and cheap
		}
	}
}

// checkProcesses fails when the manager, or a process of the clusters (kube-controller-manager, the OCM hub, a
// klusterlet agent), has exited on its own.
func (s *System) checkProcesses() error {
	if done, _ := s.manager.Exited(); done {
		return fmt.Errorf("the manager exited (%s):\n%s", s.manager.ExitDescription(), s.manager.Tail(20))
	}
	return s.Env.Err()
}

// Err reports a process of the system that ended on its own, with the end of its log; nil while all run. The
// launcher's pods are not included: it restarts them, as the kubelet would.
func (s *System) Err() error { return s.checkProcesses() }
