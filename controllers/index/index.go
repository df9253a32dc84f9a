// Package index names the cache indexes the controllers share and registers them; controller.Setup calls Register
// before any controller starts.
package index

import (
	"context"

	certificatesv1 "k8s.io/api/certificates/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/addonconfig"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/csrreview"
)

const (
	// IssuerName indexes ProxyCertificates by spec.issuerRef.name: the certificates a configuration's CA signs.
	IssuerName = "spec.issuerRef.name"
	// CSRCluster indexes the add-on's CSRs by the cluster they were requested for, so a cluster's status does not
	// scan every cluster's CSRs.
	CSRCluster = "metadata.labels.cluster-name"
	// AddOnADC indexes the add-ons by the AddOnDeploymentConfig they name in spec.configs ("namespace/name"), or
	// UsesDefaultADC when they name none and so take the ClusterManagementAddOn's default: an edit of one
	// AddOnDeploymentConfig re-queues only the add-ons it applies to.
	AddOnADC = "spec.configs.addondeploymentconfigs"
	// UsesDefaultADC is the AddOnADC value of the add-ons that name no AddOnDeploymentConfig.
	UsesDefaultADC = "<default>"
)

// Register registers every index with indexer.
func Register(ctx context.Context, indexer client.FieldIndexer) error {
	if err := indexer.IndexField(ctx, &proxyv1alpha1.ProxyCertificate{}, IssuerName, func(o client.Object) []string {
		return []string{o.(*proxyv1alpha1.ProxyCertificate).Spec.IssuerRef.Name}
	}); err != nil {
		return err
	}
	if err := indexer.IndexField(ctx, &certificatesv1.CertificateSigningRequest{}, CSRCluster, ClusterOfCSR); err != nil {
		return err
	}
	return indexer.IndexField(ctx, &addonv1alpha1.ManagedClusterAddOn{}, AddOnADC, ADCOfAddOn)
}

// ClusterOfCSR is the CSRCluster value of a CSR.
func ClusterOfCSR(o client.Object) []string {
	return []string{o.GetLabels()[csrreview.ClusterNameLabel]}
}

// ADCOfAddOn is the AddOnADC value of an add-on.
func ADCOfAddOn(o client.Object) []string {
	mca, ok := o.(*addonv1alpha1.ManagedClusterAddOn)
	if !ok {
		return nil
	}
	if ref := addonconfig.ADC(mca, nil); ref.Name != "" {
		return []string{ref.Namespace + "/" + ref.Name}
	}
	return []string{UsesDefaultADC}
}

// Requests lists objects from the cache (opts, e.g. client.MatchingFields of one of these indexes, narrow the list)
// and returns a reconcile request for each, for the map functions of watches; a failed list queues nothing.
func Requests(ctx context.Context, c client.Reader, list client.ObjectList, opts ...client.ListOption) []reconcile.Request {
	if err := c.List(ctx, list, opts...); err != nil {
		return nil
	}
	var reqs []reconcile.Request
	_ = meta.EachListItem(list, func(o runtime.Object) error {
		if obj, ok := o.(client.Object); ok {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(obj)})
		}
		return nil
	})
	return reqs
}
