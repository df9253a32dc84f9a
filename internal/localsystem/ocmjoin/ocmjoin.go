// Package ocmjoin is how a local system lets a klusterlet join an OCM hub, as OCM's cluster-manager chart and
// 'clusteradm accept' do: the bootstrap identity and its least-privilege RBAC, and the acceptance of a cluster
// (hubAcceptsClient and the approval of its own registration CSRs, which the hub's kube-controller-manager signs).
package ocmjoin

import (
	"context"
	"fmt"
	"strings"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

const (
	// BootstrapGroup is the group OCM's cluster-manager chart binds its bootstrap ClusterRole to; its bootstrap tokens
	// carry it.
	BootstrapGroup = "system:bootstrappers:managedcluster"
	// bootstrapClusterRole is the chart's name for the role.
	bootstrapClusterRole = "open-cluster-management:bootstrap"
	// clusterNameLabel marks the CSRs and other hub objects of a managed cluster.
	clusterNameLabel = "open-cluster-management.io/cluster-name"
	// addonNameLabel marks an add-on's CSRs, which accepting a cluster must not approve.
	addonNameLabel = "open-cluster-management.io/addon-name"
	pollInterval   = 200 * time.Millisecond
)

// BootstrapUser is the identity of cluster's bootstrap kubeconfig: a client certificate rather than a bootstrap token,
// in BootstrapGroup and so with the same rights.
func BootstrapUser(cluster string) string {
	return "system:open-cluster-management:bootstrap:" + cluster
}

// BootstrapRBAC is OCM's least-privilege bootstrap role, as the cluster-manager chart has it
// (templates/bootstrap_cluster_role.yaml and its binding to the bootstrap group): enough to create its ManagedCluster
// and CSR and to watch them, nothing more.
func BootstrapRBAC() []client.Object {
	return []client.Object{
		&rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: bootstrapClusterRole},
			Rules: []rbacv1.PolicyRule{
				{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}},
				{APIGroups: []string{"certificates.k8s.io"}, Resources: []string{"certificatesigningrequests"},
					Verbs: []string{"create", "get", "list", "watch"}},
				{APIGroups: []string{"cluster.open-cluster-management.io"}, Resources: []string{"managedclusters"},
					Verbs: []string{"get", "create", "list", "watch"}},
				{APIGroups: []string{"cluster.open-cluster-management.io"}, Resources: []string{"managedclustersets/join"},
					Verbs: []string{"create"}},
			},
		},
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: bootstrapClusterRole + ":managedcluster"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: bootstrapClusterRole},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: BootstrapGroup}},
		},
	}
}

// Accept does what 'clusteradm accept' does for cluster — sets hubAcceptsClient and approves the klusterlet's
// registration CSRs made with its bootstrap identity — and waits until the ManagedCluster is Available or ctx ends.
// check, when set, is called on every round and ends the wait with its error (a component that died); logf, when set,
// is told of each approval.
func Accept(ctx context.Context, hub client.Client, cluster string, check func() error, logf func(string, ...any)) error {
	var mc clusterv1.ManagedCluster
	err := wait.PollUntilContextCancel(ctx, pollInterval, true, func(ctx context.Context) (bool, error) {
		if check != nil {
			if err := check(); err != nil {
				return false, err
			}
		}
		if err := hub.Get(ctx, client.ObjectKey{Name: cluster}, &mc); err != nil {
			return false, client.IgnoreNotFound(err) // not found: the agent has not registered yet
		}
		if !mc.Spec.HubAcceptsClient {
			patch := client.MergeFrom(mc.DeepCopy())
			mc.Spec.HubAcceptsClient = true
			if err := hub.Patch(ctx, &mc, patch); err != nil {
				return false, fmt.Errorf("accept ManagedCluster %s: %w", cluster, err)
			}
		}
		if err := approveRegistrationCSRs(ctx, hub, cluster, logf); err != nil {
			return false, err
		}
		return meta.IsStatusConditionTrue(mc.Status.Conditions, clusterv1.ManagedClusterConditionAvailable), nil
	})
	if err != nil {
		return fmt.Errorf("join cluster %s (ManagedCluster conditions %s): %w", cluster, conditionSummary(mc.Status.Conditions), err)
	}
	return nil
}

// approveRegistrationCSRs approves the pending registration CSRs that cluster's bootstrap identity created. Add-on
// CSRs, and CSRs by anyone else, are left alone.
func approveRegistrationCSRs(ctx context.Context, hub client.Client, cluster string, logf func(string, ...any)) error {
	var csrs certificatesv1.CertificateSigningRequestList
	if err := hub.List(ctx, &csrs, client.MatchingLabels{clusterNameLabel: cluster}); err != nil {
		return fmt.Errorf("list CSRs of cluster %s: %w", cluster, err)
	}
	for i := range csrs.Items {
		csr := &csrs.Items[i]
		if !AwaitsAcceptance(csr, cluster) {
			continue
		}
		csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
			Type:           certificatesv1.CertificateApproved,
			Status:         corev1.ConditionTrue,
			Reason:         "AcceptedByLocalSystem",
			Message:        "Cluster " + cluster + " accepted by the local system",
			LastUpdateTime: metav1.Now(),
		})
		if err := hub.SubResource("approval").Update(ctx, csr); err != nil {
			return fmt.Errorf("approve CSR %s of cluster %s: %w", csr.Name, cluster, err)
		}
		if logf != nil {
			logf("    approved CSR %s of cluster %s", csr.Name, cluster)
		}
	}
	return nil
}

// AwaitsAcceptance reports whether csr is cluster's undecided registration request made with its bootstrap identity:
// what accepting the cluster approves.
func AwaitsAcceptance(csr *certificatesv1.CertificateSigningRequest, cluster string) bool {
	_, addon := csr.Labels[addonNameLabel]
	return !addon && csr.Labels[clusterNameLabel] == cluster && csr.Spec.Username == BootstrapUser(cluster) &&
		csr.Spec.SignerName == certificatesv1.KubeAPIServerClientSignerName && !decided(csr)
}

func decided(csr *certificatesv1.CertificateSigningRequest) bool {
	for _, c := range csr.Status.Conditions {
		if c.Type == certificatesv1.CertificateApproved || c.Type == certificatesv1.CertificateDenied {
			return true
		}
	}
	return false
}

// conditionSummary lists conditions as Type=Status, for error messages.
func conditionSummary(conds []metav1.Condition) string {
	if len(conds) == 0 {
		return "none"
	}
	parts := make([]string, 0, len(conds))
	for _, c := range conds {
		parts = append(parts, c.Type+"="+string(c.Status))
	}
	return strings.Join(parts, ", ")
}
