package localsystem

import (
	"context"
	"errors"
	"fmt"
	"os"

	certificatesv1 "k8s.io/api/certificates/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	addonv1beta1 "open-cluster-management.io/api/addon/v1beta1"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	workv1 "open-cluster-management.io/api/work/v1"
	"sigs.k8s.io/yaml"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
)

// hubKinds are what SaveHubState writes: what a reader of a failed start needs to follow an agent's registration
// (add-ons, CSRs and the decisions on them, Events) and its outcome (statuses, works). The works' spec is left out:
// it is the rendered agent, and may carry a forward proxy's credentials.
var hubKinds = []struct {
	gvk      schema.GroupVersionKind
	dropSpec bool
}{
	{gvk: clusterv1.SchemeGroupVersion.WithKind("ManagedClusterList")},
	{gvk: addonv1beta1.SchemeGroupVersion.WithKind("ManagedClusterAddOnList")},
	{gvk: certificatesv1.SchemeGroupVersion.WithKind("CertificateSigningRequestList")},
	{gvk: proxyv1alpha1.GroupVersion.WithKind("ClusterProxyStatusList")},
	{gvk: proxyv1alpha1.GroupVersion.WithKind("ManagedProxyConfigurationList")},
	{gvk: workv1.SchemeGroupVersion.WithKind("ManifestWorkList"), dropSpec: true},
	{gvk: eventsv1.SchemeGroupVersion.WithKind("EventList")},
}

// SaveHubState writes the hub's objects of hubKinds, as YAML, to hub-state.yaml in the work folder, and returns its
// path. Secrets are never written.
func (s *System) SaveHubState(ctx context.Context) (string, error) {
	path := s.path("hub-state.yaml")
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	var errs []error
	for _, k := range hubKinds {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(k.gvk)
		if err := s.HubClient.List(ctx, list); err != nil {
			errs = append(errs, fmt.Errorf("list %s: %w", k.gvk.Kind, err))
			continue
		}
		for i := range list.Items {
			if k.dropSpec {
				unstructured.RemoveNestedField(list.Items[i].Object, "spec")
			}
			unstructured.RemoveNestedField(list.Items[i].Object, "metadata", "managedFields")
		}
		out, err := yaml.Marshal(list.UnstructuredContent())
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if _, err := fmt.Fprintf(f, "# %s\n%s---\n", k.gvk.Kind, out); err != nil {
			errs = append(errs, err)
		}
	}
	return path, errors.Join(append(errs, f.Close())...)
}
