package multicluster

import (
	"context"
	"fmt"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

const (
	// clusterNameLabel marks the CSRs and other hub objects of a managed cluster.
	clusterNameLabel = "open-cluster-management.io/cluster-name"
	// addonNameLabel marks an add-on's CSRs, which accepting a cluster must not approve.
	addonNameLabel   = "open-cluster-management.io/addon-name"
	joinPollInterval = 200 * time.Millisecond
)

// acceptAndWait does what 'clusteradm accept' does for cluster — sets hubAcceptsClient and approves the klusterlet's
// registration CSR made with its bootstrap identity (kube-controller-manager then signs it) — and waits until the
// ManagedCluster is Available. It fails early when one of the environment's processes dies.
func (e *Env) acceptAndWait(ctx context.Context, cluster *Cluster) error {
	var mc clusterv1.ManagedCluster
	err := wait.PollUntilContextCancel(ctx, joinPollInterval, true, func(ctx context.Context) (bool, error) {
		if p := e.deadProcess(); p != nil {
			return false, p.diedError()
		}
		if err := e.hubClient.Get(ctx, client.ObjectKey{Name: cluster.Name}, &mc); err != nil {
			if apierrors.IsNotFound(err) {
				return false, nil // the agent has not registered yet
			}
			return false, err
		}
		if !mc.Spec.HubAcceptsClient {
			patch := client.MergeFrom(mc.DeepCopy())
			mc.Spec.HubAcceptsClient = true
			if err := e.hubClient.Patch(ctx, &mc, patch); err != nil {
				return false, fmt.Errorf("accept ManagedCluster %s: %w", cluster.Name, err)
			}
		}
		if err := e.approveRegistrationCSRs(ctx, cluster); err != nil {
			return false, err
		}
		return meta.IsStatusConditionTrue(mc.Status.Conditions, clusterv1.ManagedClusterConditionAvailable), nil
	})
	if err != nil {
		return fmt.Errorf("join cluster %s (ManagedCluster conditions %s): %w", cluster.Name, conditionSummary(mc.Status.Conditions), err)
	}
	return nil
}

// approveRegistrationCSRs approves the pending registration CSRs that cluster's bootstrap identity created. Add-on
// CSRs, and CSRs by anyone else, are left alone.
func (e *Env) approveRegistrationCSRs(ctx context.Context, cluster *Cluster) error {
	var csrs certificatesv1.CertificateSigningRequestList
	if err := e.hubClient.List(ctx, &csrs, client.MatchingLabels{clusterNameLabel: cluster.Name}); err != nil {
		return fmt.Errorf("list CSRs of cluster %s: %w", cluster.Name, err)
	}
	for i := range csrs.Items {
		csr := &csrs.Items[i]
		if !awaitsAcceptance(csr, cluster.Name) {
			continue
		}
		csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
			Type:           certificatesv1.CertificateApproved,
			Status:         corev1.ConditionTrue,
			Reason:         "AcceptedByMulticlusterEnv",
			Message:        "Cluster " + cluster.Name + " accepted by the local multi-cluster environment",
			LastUpdateTime: metav1.Now(),
		})
		if err := e.hubClient.SubResource("approval").Update(ctx, csr); err != nil {
			return fmt.Errorf("approve CSR %s of cluster %s: %w", csr.Name, cluster.Name, err)
		}
		e.logf("    approved CSR %s of cluster %s", csr.Name, cluster.Name)
	}
	return nil
}

// awaitsAcceptance reports whether csr is cluster's undecided registration request made with its bootstrap identity:
// what accepting the cluster approves.
func awaitsAcceptance(csr *certificatesv1.CertificateSigningRequest, cluster string) bool {
	_, addon := csr.Labels[addonNameLabel]
	return !addon && csr.Labels[clusterNameLabel] == cluster && csr.Spec.Username == bootstrapUser(cluster) &&
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
	s := ""
	for i, c := range conds {
		if i > 0 {
			s += ", "
		}
		s += c.Type + "=" + string(c.Status)
	}
	return s
}
