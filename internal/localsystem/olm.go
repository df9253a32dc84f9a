package localsystem

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/localsystem/olm"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/localsystem/realcluster"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/repo"
)

// OLMOptions install the operator with Operator Lifecycle Manager instead of Helm.
type OLMOptions struct {
	// Tools is bin/olm (make olm).
	Tools olm.Tools
	// Releases are the catalog's, in the order of its channel; the first is installed.
	Releases []olm.Release
	// PushImage pushes the operator's multi-platform image to ref, a repository of the registry, as 'make image-push
	// IMAGE=<ref>' does; the registry then serves it under every release's manager image name (RegistryImage).
	PushImage func(ctx context.Context, ref string) error
}

// prepareOLM writes the images of OLM and of opm, for the hub to load.
func (s *System) prepareOLM() (images []string, err error) {
	o := s.opts.OLM
	if err := o.Tools.Check(); err != nil {
		return nil, err
	}
	olmImage, opmImage, err := o.Tools.WriteImages(s.path("images"))
	if err != nil {
		return nil, err
	}
	return []string{olmImage, opmImage}, nil
}

// RegistryPort is the port of the registry of the bundle and catalog images, with Options.OLM.
const RegistryPort = 5000

// registryHost is where the registry of the bundle and catalog images listens: the machine's end of the hub's veth,
// which only the hub reaches.
func (s *System) registryHost() string {
	return net.JoinHostPort(realcluster.HostIP(s.opts.FirstIndex).String(), strconv.Itoa(RegistryPort))
}

// Registry is the registry the hub pulls the bundle and catalog images from, with Options.OLM; nil otherwise.
func (s *System) Registry() *olm.Registry { return s.registry }

// Catalog is the catalog OLM installs the operator from, with Options.OLM; nil otherwise.
func (s *System) Catalog() *olm.Catalog { return s.catalog }

// installOperatorByOLM installs OLM on the hub and the operator from the catalog as an OLM user does: bundle images
// and a catalog image pushed to a registry, OLM with a CatalogSource of that image, the operator's namespace with an
// OperatorGroup and a Subscription, the approval of the first release's InstallPlan, and the
// ManagedProxyConfiguration of the CSV's alm-examples set for this system. The registry serves the operator's
// multi-platform image under every release's manager image name, for the hub to pull.
func (s *System) installOperatorByOLM(ctx context.Context) error {
	o := s.opts.OLM
	var err error
	s.logf("serving images to the hub from a registry at %s", s.registryHost())
	if s.registry, err = o.Tools.StartRegistry(ctx, s.path("registry"), s.registryHost()); err != nil {
		return err
	}
	s.logf("pushing the bundle images of %d releases, and a catalog image of them", len(o.Releases))
	if s.catalog, err = olm.WriteCatalog(ctx, o.Tools.Opm(), filepath.Join(repo.Root(), "bundle"), s.path("olm"), o.Releases, s.registry); err != nil {
		return err
	}
	if err := o.Tools.PushCatalogImage(ctx, s.registry, s.catalog); err != nil {
		return err
	}
	ref, err := imageName(s.opts.Image)
	if err != nil {
		return err
	}
	if err := s.pushOperatorImage(ctx, ref); err != nil {
		return err
	}
	c, err := client.New(s.Hub.Config, client.Options{Scheme: olm.NewScheme()})
	if err != nil {
		return err
	}
	s.logf("installing OLM %s with its chart, and a CatalogSource of %s", olm.Version, s.catalog.Image)
	if err := o.Tools.Install(ctx, s.Helm, c, s.catalog.Image); err != nil {
		return err
	}
	first := o.Releases[0].CSVName()
	s.logf("subscribing to %s in %s and approving its InstallPlan", first, Namespace)
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}); err != nil {
		return err
	}
	if err := olm.Subscribe(ctx, c, Namespace, first); err != nil {
		return err
	}
	if _, err := olm.Approve(ctx, c, Namespace, first); err != nil {
		return err
	}
	if err := olm.WaitSucceeded(ctx, c, Namespace, first, 5*time.Minute); err != nil {
		return err
	}
	csv := &operatorsv1alpha1.ClusterServiceVersion{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: first}, csv); err != nil {
		return err
	}
	mpc, err := sampleConfiguration(csv)
	if err != nil {
		return err
	}
	mpc.Spec.ProxyServer.Image, mpc.Spec.ProxyAgent.Image = ref.String(), ref.String()
	mpc.Spec.ProxyServer.Replicas, mpc.Spec.ProxyAgent.Replicas = int32(s.opts.Replicas), int32(s.opts.Replicas)
	mpc.Spec.ProxyServer.Namespace = Namespace
	mpc.Spec.ProxyServer.Entrypoint = &proxyv1alpha1.ManagedProxyConfigurationProxyServerEntrypoint{
		Type: proxyv1alpha1.EntryPointTypeHostname, Hostname: &proxyv1alpha1.EntryPointHostname{Value: EntrypointHost},
		Port: EntrypointPort,
	}
	if err := s.HubClient.Create(ctx, mpc); err != nil {
		return fmt.Errorf("create the ManagedProxyConfiguration of the CSV's alm-examples: %w", err)
	}
	return s.exposeProxyServers(ctx)
}

// pushOperatorImage pushes the operator's multi-platform image (OLMOptions.PushImage) to the registry under the
// name of the image of 'make image', and tags it there with every release's manager image name.
func (s *System) pushOperatorImage(ctx context.Context, image name.Tag) error {
	first := s.RegistryImage(image.String())
	s.logf("pushing the operator's multi-platform image to %s (make image-push)", first)
	if err := s.opts.OLM.PushImage(ctx, first); err != nil {
		return err
	}
	for _, release := range s.catalog.Images {
		if err := s.registry.Tag(ctx, first, s.RegistryImage(release)); err != nil {
			return err
		}
	}
	return nil
}

// RegistryImage is where the registry serves image (<host>/<repository>:<tag>) to the hub, with Options.OLM: the
// same repository and tag on the registry's host, which the hub's containerd pulls for image's host.
func (s *System) RegistryImage(image string) string {
	ref, err := name.NewTag(image)
	if err != nil {
		return ""
	}
	return s.registryHost() + "/" + ref.RepositoryStr() + ":" + ref.TagStr()
}

// sampleConfiguration is the ManagedProxyConfiguration of the CSV's alm-examples, what OLM's consoles offer a user.
func sampleConfiguration(csv *operatorsv1alpha1.ClusterServiceVersion) (*proxyv1alpha1.ManagedProxyConfiguration, error) {
	var examples []json.RawMessage
	if err := json.Unmarshal([]byte(csv.Annotations["alm-examples"]), &examples); err != nil {
		return nil, fmt.Errorf("%s alm-examples: %w", csv.Name, err)
	}
	for _, raw := range examples {
		var meta metav1.TypeMeta
		if err := json.Unmarshal(raw, &meta); err != nil {
			return nil, err
		}
		if meta.Kind == "ManagedProxyConfiguration" {
			mpc := &proxyv1alpha1.ManagedProxyConfiguration{}
			return mpc, json.Unmarshal(raw, mpc)
		}
	}
	return nil, fmt.Errorf("%s alm-examples have no ManagedProxyConfiguration", csv.Name)
}
