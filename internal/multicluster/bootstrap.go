package multicluster

import (
	"context"
	"fmt"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

const (
	// bootstrapGroup is the group OCM's cluster-manager chart binds to its bootstrap ClusterRole; its bootstrap
	// tokens carry it.
	bootstrapGroup = "system:bootstrappers:managedcluster"
	// bootstrapClusterRole is the chart's name for the role.
	bootstrapClusterRole = "open-cluster-management:bootstrap"
)

// bootstrapUser is the identity of cluster's bootstrap kubeconfig: a client certificate rather than a bootstrap
// token, with the same group and so the same rights.
func bootstrapUser(cluster string) string {
	return "system:open-cluster-management:bootstrap:" + cluster
}

// bootstrapRBAC is OCM's least-privilege bootstrap role, copied from the cluster-manager chart
// (templates/bootstrap_cluster_role.yaml and its binding to the bootstrap group): enough to create its
// ManagedCluster and CSR and to watch them, nothing more.
func bootstrapRBAC() []client.Object {
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
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: bootstrapGroup}},
		},
	}
}

func createBootstrapRBAC(ctx context.Context, c client.Client) error {
	for _, obj := range bootstrapRBAC() {
		if err := c.Create(ctx, obj); err != nil {
			return fmt.Errorf("create bootstrap RBAC %s: %w", obj.GetName(), err)
		}
	}
	return nil
}
