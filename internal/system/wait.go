package system

import (
	"context"
	"fmt"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/localsystem"
)

// ClusterState is one cluster's view from the hub, read as the real-cluster system reads it.
type ClusterState = localsystem.ClusterState

// States reads every cluster's ClusterProxyStatus and ManagedClusterAddOn.
func (s *System) States(ctx context.Context) ([]ClusterState, error) {
	return localsystem.ClusterStates(ctx, s.HubClient, s.clusterNames())
}

func (s *System) clusterNames() []string {
	names := make([]string, 0, len(s.Env.Clusters))
	for _, c := range s.Env.Clusters {
		names = append(names, c.Name)
	}
	return names
}

// waitAvailable waits until every cluster's tunnel is Available, failing early when a process died.
func (s *System) waitAvailable(ctx context.Context) error {
	if err := localsystem.WaitAvailable(ctx, s.HubClient, s.clusterNames(), s.opts.ReadyTimeout, s.opts.Log, s.checkProcesses); err != nil {
		return fmt.Errorf("%w; logs are in %s", err, s.opts.WorkDir)
	}
	return nil
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
