// Package localsystem runs the whole product on real Kubernetes clusters of this machine (internal/localsystem/realcluster), as a
// user runs it: a hub and two managed clusters, cluster1 and 1st-cluster; OCM's hub controllers and klusterlets as
// pods from an image of bin/ocm-local; the operator installed with the README's helm install from the image of 'make
// image', its proxy-server with several replicas behind a NodePort; squid on the machine as the ONLY route from
// cluster1's network to the hub (its klusterlet's bootstrap kubeconfig has a proxy-url, its agent an
// AddOnDeploymentConfig proxyConfig, both over TLS to squid with squid's CA); 1st-cluster reaches the hub directly,
// through a plain TCP forwarder on its side of the machine. 'make run' and the end-to-end suites use it.
package localsystem

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/localsystem/olm"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/localsystem/realcluster"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/localsystem/squid"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/repo"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/scheme"
)

const (
	// ProxiedCluster reaches the hub only through squid, over TLS.
	ProxiedCluster = "cluster1"
	// DigitCluster has a name that starts with a digit, which the existing addon cannot serve; it reaches the hub
	// directly.
	DigitCluster = "1st-cluster"
	// Namespace is where the README installs the operator, and so its proxy-servers.
	Namespace = "open-cluster-management-addon"
	// EntrypointHost is the name agents dial the proxy-servers' agent port by, as a public name of the hub: squid
	// resolves it to the hub's node (its hosts_file), 1st-cluster's CoreDNS to its forwarder.
	EntrypointHost = "proxy-entrypoint.hub.internal"
	// DigitIssuerHost names DigitCluster's kube-apiserver as the issuer of its ServiceAccount tokens (DigitIssuer):
	// squid resolves it to that cluster's node, so agents behind squid reach its OpenID discovery, as an OIDC issuer.
	DigitIssuerHost = "issuer.1st-cluster.internal"
	// ProxyConfigName is the AddOnDeploymentConfig with the forward proxy (httpsProxy and caBundle), in cluster1's
	// namespace.
	ProxyConfigName = "proxy-config"
	// SquidPort and SquidTLSPort are squid's ports on cluster1's side of the machine.
	SquidPort, SquidTLSPort = 3128, 3129

	ocmImage = "registry.local/ocm-local:dev"
)

// DigitIssuer is the issuer of DigitCluster's ServiceAccount tokens, at its kube-apiserver.
var DigitIssuer = fmt.Sprintf("https://%s:%d", DigitIssuerHost, realcluster.APIServerPort)

// Options configure Start.
type Options struct {
	// WorkDir holds everything: each cluster's folder, squid's, the images, kubeconfigs.
	WorkDir string
	// FirstIndex is the hub's realcluster index; the managed clusters take the next two.
	FirstIndex int
	// NodeAssets is the folder 'make node-assets' prints; Pause is bin/pause.
	NodeAssets, Pause string
	// Image is the archive of 'make image'; OCMLocal is bin/ocm-local; Helm is bin/helm.
	Image, OCMLocal, Helm string
	// Replicas of the proxy-server (and of each cluster's agent): the chart's replicas value.
	Replicas int
	// HelmValues are further --set values of the helm install, after the local system's own (HelmValues).
	HelmValues []string
	// OLM, when set, installs the operator with Operator Lifecycle Manager from a catalog instead of with Helm.
	OLM *OLMOptions
	// AddOn, when set, installs the existing OCM cluster-proxy add-on instead of the operator (AddOnOptions).
	AddOn *AddOnOptions
	// Log receives progress lines; nil discards them.
	Log io.Writer
	// ReadyTimeout bounds the wait for every cluster's tunnel to be Available.
	ReadyTimeout time.Duration
}

// DefaultOptions are the paths 'make node-assets image ocm-local helm' fill, for a system under workDir.
func DefaultOptions(workDir string, firstIndex int) Options {
	bin := filepath.Join(repo.Root(), "bin")
	return Options{
		WorkDir: workDir, FirstIndex: firstIndex, NodeAssets: os.Getenv("NODE_ASSETS"), Pause: filepath.Join(bin, "pause"),
		Image: filepath.Join(bin, "image.tar"), OCMLocal: filepath.Join(bin, "ocm-local"), Helm: filepath.Join(bin, "helm"),
		Replicas: 3,
	}
}

// System is the running product.
type System struct {
	Hub *realcluster.Cluster
	// Managed are the managed clusters, cluster1 then 1st-cluster.
	Managed   []*realcluster.Cluster
	Squid     *squid.Squid
	HubClient client.Client

	opts       Options
	forwarders []*forwarder
	// registry serves the bundle and catalog images to the hub, and catalog is what OLM installs the operator from,
	// with Options.OLM.
	registry *olm.Registry
	catalog  *olm.Catalog
	// extraImages are loaded into every cluster beside the operator's and OCM's: the add-on's, with Options.AddOn.
	extraImages []string
}

// Start brings the whole system up and returns once every cluster's ClusterProxyStatus and ManagedClusterAddOn are
// Available. On error everything started is stopped and removed.
func Start(ctx context.Context, opts Options) (*System, error) {
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	if opts.ReadyTimeout == 0 {
		opts.ReadyTimeout = 5 * time.Minute
	}
	if opts.Replicas == 0 {
		opts.Replicas = 1
	}
	if err := realcluster.Preflight(opts.NodeAssets, opts.Pause); err != nil {
		return nil, err
	}
	for what, path := range map[string]string{"the image (make image)": opts.Image, "ocm-local (make ocm-local)": opts.OCMLocal, "helm (make helm)": opts.Helm} {
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
	}
	if err := os.MkdirAll(opts.WorkDir, 0o755); err != nil {
		return nil, err
	}
	s := &System{opts: opts}
	if err := s.start(ctx); err != nil {
		return nil, errors.Join(err, s.Stop())
	}
	return s, nil
}

func (s *System) logf(format string, args ...any) {
	fmt.Fprintf(s.opts.Log, "==> "+format+"\n", args...)
}

func (s *System) path(elem ...string) string {
	return filepath.Join(append([]string{s.opts.WorkDir}, elem...)...)
}

func (s *System) start(ctx context.Context) error {
	ocmArchive, err := s.ocmImage()
	if err != nil {
		return err
	}
	var olmImages []string
	if s.opts.AddOn != nil {
		s.logf("building the existing add-on's image from %s", s.opts.AddOn.Source)
		archive, err := s.addOnImage(ctx)
		if err != nil {
			return err
		}
		s.extraImages = append(s.extraImages, archive)
	}
	if s.opts.OLM != nil {
		s.logf("writing the images of OLM and of opm")
		if olmImages, err = s.prepareOLM(); err != nil {
			return err
		}
	}
	s.logf("starting three real clusters: the hub, %s and %s", ProxiedCluster, DigitCluster)
	if err := s.startClusters(ctx, ocmArchive, olmImages); err != nil {
		return err
	}
	if s.HubClient, err = client.New(s.Hub.Config, client.Options{Scheme: scheme.New()}); err != nil {
		return err
	}
	proxied, digit := s.Managed[0], s.Managed[1]
	s.logf("starting squid on %s as %s's only route to the hub, and a plain forwarder for %s", proxied.HostIP, ProxiedCluster, DigitCluster)
	s.Squid, err = squid.Start(s.path("squid"), squid.Options{
		Listen: proxied.HostIP, Port: SquidPort, TLSPort: SquidTLSPort,
		Hosts:     map[string]string{EntrypointHost: s.Hub.NodeIP.String(), DigitIssuerHost: digit.NodeIP.String()},
		AllowFrom: []string{proxied.NodeIP.String() + "/32", "127.0.0.0/8"},
	})
	if err != nil {
		return err
	}
	for _, port := range []int{realcluster.APIServerPort, EntrypointPort} {
		f, err := startForwarder(net.JoinHostPort(digit.HostIP.String(), strconv.Itoa(port)), net.JoinHostPort(s.Hub.NodeIP.String(), strconv.Itoa(port)))
		if err != nil {
			return err
		}
		s.forwarders = append(s.forwarders, f)
	}

	s.logf("starting OCM's hub controllers as a pod on the hub")
	if err := s.deployOCMHub(ctx); err != nil {
		return err
	}
	s.logf("starting the klusterlets of %s and %s as pods and accepting them on the hub", ProxiedCluster, DigitCluster)
	joined := make([]error, len(s.Managed))
	var wg sync.WaitGroup
	for i, c := range s.Managed {
		wg.Go(func() { joined[i] = s.joinCluster(ctx, c) })
	}
	wg.Wait()
	if err := errors.Join(joined...); err != nil {
		return err
	}
	s.logf("waiting for OCM's add-on webhook to convert add-ons")
	if err := s.waitForAddOnWebhook(ctx); err != nil {
		return err
	}
	switch {
	case s.opts.AddOn != nil:
		s.logf("installing the existing add-on: helm install -n %s --create-namespace cluster-proxy %s/charts/cluster-proxy", Namespace, s.opts.AddOn.Source)
		if err := s.installAddOn(ctx); err != nil {
			return err
		}
	case s.opts.OLM != nil:
		if err := s.installOperatorByOLM(ctx); err != nil {
			return err
		}
	default:
		s.logf("installing the operator: helm install -n %s --create-namespace cluster-proxy charts/cluster-proxy", Namespace)
		if err := s.installOperator(ctx); err != nil {
			return err
		}
	}
	s.logf("installing the add-on on both clusters (%s through squid, with an AddOnDeploymentConfig proxyConfig)", ProxiedCluster)
	if err := s.installAddOns(ctx); err != nil {
		return err
	}
	s.logf("waiting for every cluster's tunnel to be Available")
	return s.waitAvailable(ctx)
}

// startClusters starts the three clusters side by side, each with the operator's and OCM's images, the hub with
// hubImages too.
func (s *System) startClusters(ctx context.Context, ocmArchive string, hubImages []string) error {
	i := s.opts.FirstIndex
	digitHost := realcluster.HostIP(i + 2).String()
	specs := []realcluster.Options{
		// 1st-cluster's klusterlet dials the hub's kube-apiserver at its forwarder, so the certificate names it.
		{Name: "hub", Index: i, APIServerSANs: []string{digitHost}},
		{Name: ProxiedCluster, Index: i + 1},
		{Name: DigitCluster, Index: i + 2, CoreDNSHosts: map[string]string{EntrypointHost: digitHost},
			APIServerSANs: []string{DigitIssuerHost}, ServiceAccountIssuer: DigitIssuer},
	}
	clusters := make([]*realcluster.Cluster, len(specs))
	errs := make([]error, len(specs))
	var wg sync.WaitGroup
	for n, spec := range specs {
		spec.Dir, spec.Binaries, spec.Pause = s.path("clusters", spec.Name), s.opts.NodeAssets, s.opts.Pause
		spec.Images, spec.KeepDir = append([]string{ocmArchive}, s.extraImages...), true
		switch {
		case spec.Name != "hub":
			spec.Images = append(spec.Images, s.opts.Image)
		case s.opts.OLM != nil:
			// OLM's hub pulls the operator's image, as its users' hubs do: the registry serves the host its name
			// holds (quay.io), so the node holds none of it beforehand.
			ref, err := imageName(s.opts.Image)
			if err != nil {
				return err
			}
			spec.Images = append(spec.Images, hubImages...)
			spec.PlainHTTPRegistries = []string{s.registryHost()}
			spec.RegistryMirrors = map[string]string{ref.RegistryStr(): s.registryHost()}
		default:
			spec.Images = append(spec.Images, append([]string{s.opts.Image}, hubImages...)...)
		}
		wg.Go(func() { clusters[n], errs[n] = realcluster.Start(ctx, spec) })
	}
	wg.Wait()
	s.Hub, s.Managed = clusters[0], []*realcluster.Cluster{clusters[1], clusters[2]}
	return errors.Join(errs...)
}

// Clusters are the managed clusters' names.
func (s *System) Clusters() []string {
	names := make([]string, 0, len(s.Managed))
	for _, c := range s.Managed {
		names = append(names, c.Name())
	}
	return names
}

// Stop stops and removes everything: the clusters (every process, mount, namespace, route and cgroup), squid, the
// forwarders. The work folder stays (logs).
func (s *System) Stop() error {
	var errs []error
	for _, f := range s.forwarders {
		f.Close()
	}
	s.registry.Stop()
	if s.Squid != nil {
		errs = append(errs, s.Squid.Stop())
	}
	// The clusters are independent: they stop side by side.
	clusters := append([]*realcluster.Cluster{s.Hub}, s.Managed...)
	stopped := make([]error, len(clusters))
	var wg sync.WaitGroup
	for i, c := range clusters {
		if c != nil {
			wg.Go(func() { stopped[i] = c.Stop() })
		}
	}
	wg.Wait()
	return errors.Join(append(errs, stopped...)...)
}

// Leftovers lists what of the system is still on the machine; empty after Stop.
func (s *System) Leftovers() []string {
	var out []string
	for n := range 3 {
		out = append(out, realcluster.Leftovers(s.opts.FirstIndex+n, "")...)
	}
	return out
}

// Memory is what the three clusters' processes hold now (daemons and pods), squid and the forwarders aside.
func (s *System) Memory() (realcluster.Memory, error) {
	var total realcluster.Memory
	for _, c := range append([]*realcluster.Cluster{s.Hub}, s.Managed...) {
		m, err := c.Memory()
		if err != nil {
			return realcluster.Memory{}, err
		}
		total = total.Add(m)
	}
	return total, nil
}
