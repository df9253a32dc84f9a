package localsystem

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	addonv1beta1 "open-cluster-management.io/api/addon/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/render"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/kubeclient"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/repo"
)

// HelmValues are the values the local system installs the chart with, beyond its defaults: the image of 'make image'
// (by the name in its archive, never pulled), the entrypoint, the replicas, the user-server, a short tunnel-health
// interval, a CA rollover grace fit for its kubelets' 10 s sync, Manual add-on installation, and ProxyCertificates
// issued in namespace default too (TenantNamespace); then Options.HelmValues.
func (s *System) HelmValues() ([]string, error) {
	ref, err := imageName(s.opts.Image)
	if err != nil {
		return nil, err
	}
	values := []string{
		"image.repository=" + ref.Context().Name(), "image.tag=" + ref.TagStr(), "image.pullPolicy=Never",
		"replicas=" + strconv.Itoa(s.opts.Replicas),
		"proxyServer.entrypointAddress=" + EntrypointHost, "proxyServer.port=" + strconv.Itoa(EntrypointPort),
		"userServer.enabled=true",
		"manager.extraArgs={--tunnel-health-interval=5s,--ca-rollover-grace=45s}",
		"manager.proxyCertificateNamespaces={" + TenantNamespace + "}",
	}
	if s.opts.AddOn == nil {
		// A hub that ran the add-on keeps its Placement (the add-on's values say so); a new one installs by hand.
		values = append(values, "installByPlacement.enabled=false")
	}
	return append(values, s.opts.HelmValues...), nil
}

// TenantNamespace is the namespace beside the operator's that the local system lets ProxyCertificates be issued
// into: one that exists before the install, as the chart's Role there needs.
const TenantNamespace = "default"

// imageName is the name an image archive (docker-archive) is tagged with.
func imageName(archive string) (name.Tag, error) {
	manifest, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(archive) })
	if err != nil {
		return name.Tag{}, fmt.Errorf("read %s: %w", archive, err)
	}
	if len(manifest) != 1 || len(manifest[0].RepoTags) != 1 {
		return name.Tag{}, fmt.Errorf("%s must hold one image with one name", archive)
	}
	return name.NewTag(manifest[0].RepoTags[0])
}

// Ports of the proxy-servers on the hub's node (NodePorts), for the agents and for programs on the machine.
const (
	// EntrypointPort is the agent port's, and so the entrypoint's port: squid and 1st-cluster's forwarder send the
	// agents there.
	EntrypointPort = 30091
	// FrontendNodePort (gRPC), HTTPConnectNodePort and UserServerNodePort reach the proxy-servers' in-cluster
	// Services from the machine; Resolve maps the Services' names to them.
	FrontendNodePort, HTTPConnectNodePort, UserServerNodePort = 30090, 30094, 30092
)

// Resolve maps the proxy-servers' in-cluster Service addresses to the NodePorts on the hub's node, in the form of
// the kubectl plugin's --resolve and clusterproxy.ParseResolve: hub programs on the machine reach the Services with
// the names (and certificates) they have in the cluster.
func (s *System) Resolve() []string {
	node, ports := s.Hub.NodeIP.String(), defaultPorts()
	entry := fmt.Sprintf("proxy-entrypoint.%s.svc", Namespace)
	user := fmt.Sprintf("%s.%s.svc", proxyv1alpha1.UserServerServiceName, Namespace)
	return []string{
		fmt.Sprintf("%s:%d=%s:%d", entry, ports.ProxyServer, node, FrontendNodePort),
		fmt.Sprintf("%s:%d=%s:%d", entry, ports.HTTPConnectServer, node, HTTPConnectNodePort),
		fmt.Sprintf("%s:%d=%s:%d", user, proxyv1alpha1.UserServerPort, node, UserServerNodePort),
	}
}

// defaultPorts are the proxy-servers' ports: the chart leaves them at their defaults.
func defaultPorts() contract.Ports {
	return contract.PortsOf(&proxyv1alpha1.ManagedProxyConfiguration{})
}

// Helm runs bin/helm against the hub, with a helm home of its own (no repositories, no plugins, nothing written to
// the user's), and returns its output.
func (s *System) Helm(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, s.opts.Helm, append(args, "--kubeconfig", s.Hub.Kubeconfig)...)
	home := s.path("helm")
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+home, "HELM_CACHE_HOME="+home, "HELM_DATA_HOME="+home)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("helm %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// HubClientFiles writes the proxy-client pair and the proxy-servers' CA bundle from the hub into dir, as a hub
// program mounts them (for curl through the HTTP-CONNECT frontend), and returns their paths.
func (s *System) HubClientFiles(ctx context.Context, dir string) (cert, key, ca string, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", "", err
	}
	pair, bundle := &corev1.Secret{}, &corev1.Secret{}
	mpc := &proxyv1alpha1.ManagedProxyConfiguration{ObjectMeta: metav1.ObjectMeta{Name: proxyv1alpha1.DefaultConfigurationName}}
	if err := s.HubClient.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: contract.SecretNamesOf(mpc).ProxyClient}, pair); err != nil {
		return "", "", "", err
	}
	if err := s.HubClient.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: proxyv1alpha1.CABundleSecretName}, bundle); err != nil {
		return "", "", "", err
	}
	cert, key, ca = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "ca.crt")
	for path, data := range map[string][]byte{cert: pair.Data["tls.crt"], key: pair.Data["tls.key"], ca: bundle.Data["ca.crt"]} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return "", "", "", err
		}
	}
	return cert, key, ca, nil
}

// installOperator runs the README's helm install with HelmValues, then exposes the proxy-servers on the hub's node:
// the agent port at EntrypointPort, the frontends and the user-server at their NodePorts.
func (s *System) installOperator(ctx context.Context) error {
	if err := s.helmInstall(ctx); err != nil {
		return err
	}
	return s.exposeProxyServers(ctx)
}

// helmInstall runs the README's helm install with HelmValues.
func (s *System) helmInstall(ctx context.Context) error {
	args := []string{"install", "-n", Namespace, "--create-namespace", "cluster-proxy", filepath.Join(repo.Root(), "charts", "cluster-proxy")}
	values, err := s.HelmValues()
	if err != nil {
		return err
	}
	for _, v := range values {
		args = append(args, "--set", v)
	}
	_, err = s.Helm(ctx, args...)
	return err
}

// Reinstall installs the operator again after 'helm uninstall', as the system first did: the README's helm install with
// HelmValues, the add-on on every cluster, then it waits until every cluster is Available. What the uninstall left
// (the signer CA, users' objects, the system's NodePort Services) is taken as it is.
func (s *System) Reinstall(ctx context.Context) error {
	if err := s.helmInstall(ctx); err != nil {
		return err
	}
	if err := s.installAddOns(ctx); err != nil {
		return err
	}
	return s.waitAvailable(ctx)
}

// exposeProxyServers exposes the proxy-servers on the hub's node: the agent port at EntrypointPort, the frontends and
// the user-server at their NodePorts.
func (s *System) exposeProxyServers(ctx context.Context) error {
	selector := map[string]string{proxyv1alpha1.ComponentLabel: proxyv1alpha1.ComponentProxyServer,
		render.ConfigurationLabel: proxyv1alpha1.DefaultConfigurationName}
	userServer := selector
	if s.opts.AddOn != nil {
		// The add-on's proxy-servers carry the component label alone, and its user-server is a Deployment of its own;
		// the operator's proxy-servers, which replace them, carry the component label too (FollowUserServerService
		// moves the user-server's NodePort along).
		selector = map[string]string{proxyv1alpha1.ComponentLabel: proxyv1alpha1.ComponentProxyServer}
		userServer = addOnUserServerSelector
	}
	nodePort := func(name string, ports ...corev1.ServicePort) *corev1.Service {
		return &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace},
			Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: selector, Ports: ports},
		}
	}
	port := func(name string, port, nodePort int32) corev1.ServicePort {
		return corev1.ServicePort{Name: name, Port: port, TargetPort: intstr.FromInt32(port), NodePort: nodePort}
	}
	ports := defaultPorts()
	// The agents' entrypoint publishes replicas that are not Ready yet, as docs/install.md asks of an entrypoint: a
	// new replica turns Ready only once the agents have reached it.
	agents := nodePort("proxy-agent-nodeport", port("agent", ports.AgentServer, EntrypointPort))
	agents.Spec.PublishNotReadyAddresses = true
	machine := nodePort("proxy-machine-nodeports",
		port("frontend", ports.ProxyServer, FrontendNodePort),
		port("http-connect", ports.HTTPConnectServer, HTTPConnectNodePort))
	if s.opts.AddOn == nil {
		machine.Spec.Ports = append(machine.Spec.Ports, port("user-server", proxyv1alpha1.UserServerPort, UserServerNodePort))
		return kubeclient.CreateAll(ctx, s.HubClient, agents, machine)
	}
	users := nodePort(UserServerNodePortName, port("user-server", proxyv1alpha1.UserServerPort, UserServerNodePort))
	users.Spec.Selector = userServer
	return kubeclient.CreateAll(ctx, s.HubClient, agents, users, machine)
}

// installAddOns creates cluster1's AddOnDeploymentConfig (squid over TLS, with its CA) and the add-on on both
// clusters, as a user of today's OCM writes them: add-on API v1beta1. A hub of the existing add-on installs it by its
// Placement instead: only cluster1's ManagedClusterAddOn is then given the AddOnDeploymentConfig.
func (s *System) installAddOns(ctx context.Context) error {
	proxy := addonv1beta1.ProxyConfig{HTTPSProxy: s.Squid.TLSURL(), CABundle: s.Squid.CA()}
	if s.opts.AddOn != nil {
		// The add-on's proxy-agent (gRPC's HTTP CONNECT) speaks plain HTTP to a proxy: its users give it squid's plain
		// port, which the operator's agents take as well.
		proxy = addonv1beta1.ProxyConfig{HTTPSProxy: s.Squid.URL()}
	}
	adc := &addonv1beta1.AddOnDeploymentConfig{
		ObjectMeta: metav1.ObjectMeta{Name: ProxyConfigName, Namespace: ProxiedCluster},
		Spec:       addonv1beta1.AddOnDeploymentConfigSpec{ProxyConfig: proxy},
	}
	if s.opts.AddOn != nil {
		if err := kubeclient.CreateAll(ctx, s.HubClient, adc); err != nil {
			return err
		}
		return s.configureAddOnOfPlacement(ctx)
	}
	objs := []client.Object{adc}
	for _, name := range s.Clusters() {
		mca := &addonv1beta1.ManagedClusterAddOn{ObjectMeta: metav1.ObjectMeta{Name: proxyv1alpha1.AddonName, Namespace: name}}
		if name == ProxiedCluster {
			mca.Spec.Configs = proxyConfigs()
		}
		objs = append(objs, mca)
	}
	return kubeclient.CreateAll(ctx, s.HubClient, objs...)
}

// configureAddOnOfPlacement points cluster1's ManagedClusterAddOn, which OCM creates for the add-on's Placement, at
// the AddOnDeploymentConfig, as a user of the add-on does to send one cluster's agent through a proxy.
func (s *System) configureAddOnOfPlacement(ctx context.Context) error {
	key := client.ObjectKey{Namespace: ProxiedCluster, Name: proxyv1alpha1.AddonName}
	err := wait.PollUntilContextTimeout(ctx, time.Second, s.opts.ReadyTimeout, true, func(ctx context.Context) (bool, error) {
		mca := &addonv1beta1.ManagedClusterAddOn{}
		if err := s.HubClient.Get(ctx, key, mca); err != nil {
			return false, client.IgnoreNotFound(err) // not created yet
		}
		mca.Spec.Configs = proxyConfigs()
		switch err := s.HubClient.Update(ctx, mca); {
		case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
			return false, nil // written or removed meanwhile: read again
		default:
			return err == nil, err
		}
	})
	if err != nil {
		return fmt.Errorf("point %s's ManagedClusterAddOn, which OCM creates from the add-on's Placement, at its AddOnDeploymentConfig: %w", ProxiedCluster, err)
	}
	return nil
}

// proxyConfigs are cluster1's add-on configs: its AddOnDeploymentConfig.
func proxyConfigs() []addonv1beta1.AddOnConfig {
	return []addonv1beta1.AddOnConfig{{
		ConfigGroupResource: addonv1beta1.ConfigGroupResource{Group: addonv1beta1.GroupName, Resource: "addondeploymentconfigs"},
		ConfigReferent:      addonv1beta1.ConfigReferent{Namespace: ProxiedCluster, Name: ProxyConfigName},
	}}
}

// ClusterState is one managed cluster's tunnel as the hub reports it.
type ClusterState struct {
	Name string
	// Status summarises the ClusterProxyStatus conditions.
	Status         string
	AddOnAvailable metav1.ConditionStatus
	Available      bool
}

// States reads every managed cluster's ClusterProxyStatus and ManagedClusterAddOn.
func (s *System) States(ctx context.Context) ([]ClusterState, error) {
	return ClusterStates(ctx, s.HubClient, s.Clusters())
}

// ClusterStates reads the ClusterProxyStatus and ManagedClusterAddOn (v1beta1) of each of clusters from the hub,
// sorted by name.
func ClusterStates(ctx context.Context, hub client.Client, clusters []string) ([]ClusterState, error) {
	var out []ClusterState
	for _, name := range clusters {
		st := ClusterState{Name: name, AddOnAvailable: metav1.ConditionUnknown}
		cps := &proxyv1alpha1.ClusterProxyStatus{}
		switch err := hub.Get(ctx, client.ObjectKey{Namespace: name, Name: proxyv1alpha1.AddonName}, cps); {
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
		mca := &addonv1beta1.ManagedClusterAddOn{}
		if err := hub.Get(ctx, client.ObjectKey{Namespace: name, Name: proxyv1alpha1.AddonName}, mca); client.IgnoreNotFound(err) != nil {
			return nil, err
		}
		if cond := meta.FindStatusCondition(mca.Status.Conditions, addonv1beta1.ManagedClusterAddOnConditionAvailable); cond != nil {
			st.AddOnAvailable = cond.Status
		}
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// waitAvailable waits until every cluster's tunnel is Available and every proxy-server replica holds every agent
// (a request through any replica reaches any cluster), writing each cluster's state, and what the replicas miss, to
// the log when it changes.
func (s *System) waitAvailable(ctx context.Context) error {
	if s.opts.AddOn != nil {
		return s.waitAddOnAvailable(ctx)
	}
	deadline := time.Now().Add(s.opts.ReadyTimeout)
	last := map[string]string{}
	for {
		states, err := s.States(ctx)
		if err != nil {
			return err
		}
		available := true
		for _, st := range states {
			line := fmt.Sprintf("%s; ManagedClusterAddOn Available=%s", st.Status, st.AddOnAvailable)
			if last[st.Name] != line {
				fmt.Fprintf(s.opts.Log, "    %s: %s\n", st.Name, line)
				last[st.Name] = line
			}
			available = available && st.Available && st.AddOnAvailable == metav1.ConditionTrue
		}
		missing := "not every cluster is Available"
		if available {
			all, why, err := s.everyReplicaHoldsEveryAgent(ctx)
			switch {
			case err != nil:
				missing = err.Error()
			case all:
				return nil
			default:
				missing = why
			}
			if last[""] != missing {
				fmt.Fprintf(s.opts.Log, "    %s\n", missing)
				last[""] = missing
			}
		}
		if time.Now().After(deadline) {
			if _, err := s.SaveHubState(ctx); err != nil {
				fmt.Fprintf(s.opts.Log, "    saving the hub's objects: %v\n", err)
			}
			return fmt.Errorf("%s after %s; logs and the hub's objects (hub-state.yaml) are in %s", missing, s.opts.ReadyTimeout, s.opts.WorkDir)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second): // a person watches this: once a second is enough and cheap
		}
	}
}
