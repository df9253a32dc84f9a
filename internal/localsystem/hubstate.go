package localsystem

import (
	"context"
	"errors"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"
)

// hubKinds are what SaveHubState writes: what a reader of a failed start needs to follow an agent's registration
// (add-ons, CSRs and the decisions on them, Events) and its outcome (statuses, works). The works' spec is left out:
// it is the rendered agent, and may carry a forward proxy's credentials.
var hubKinds = []struct {
	gvk      schema.GroupVersionKind
	dropSpec bool
}{
	{gvk: schema.GroupVersionKind{Group: "cluster.open-cluster-management.io", Version: "v1", Kind: "ManagedClusterList"}},
	{gvk: schema.GroupVersionKind{Group: "addon.open-cluster-management.io", Version: "v1beta1", Kind: "ManagedClusterAddOnList"}},
	{gvk: schema.GroupVersionKind{Group: "certificates.k8s.io", Version: "v1", Kind: "CertificateSigningRequestList"}},
	{gvk: schema.GroupVersionKind{Group: "proxy.open-cluster-management.io", Version: "v1alpha1", Kind: "ClusterProxyStatusList"}},
	{gvk: schema.GroupVersionKind{Group: "proxy.open-cluster-management.io", Version: "v1alpha1", Kind: "ManagedProxyConfigurationList"}},
	{gvk: schema.GroupVersionKind{Group: "work.open-cluster-management.io", Version: "v1", Kind: "ManifestWorkList"}, dropSpec: true},
	{gvk: schema.GroupVersionKind{Group: "events.k8s.io", Version: "v1", Kind: "EventList"}},
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
