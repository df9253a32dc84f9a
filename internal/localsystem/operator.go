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
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/render"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testenv"
)

// HelmValues are the values the local system installs the chart with, beyond its defaults: the image of 'make image'
// (by the name in its archive, never pulled), the entrypoint, the replicas, the user-server, a short tunnel-health
// interval, and Manual add-on installation.
func (s *System) HelmValues() ([]string, error) {
	ref, err := imageName(s.opts.Image)
	if err != nil {
		return nil, err
	}
	return []string{
		"image.repository=" + ref.Context().Name(), "image.tag=" + ref.TagStr(), "image.pullPolicy=Never",
		"replicas=" + strconv.Itoa(s.opts.Replicas),
		"proxyServer.entrypointAddress=" + EntrypointHost, "proxyServer.port=" + strconv.Itoa(EntrypointPort),
		"userServer.enabled=true",
		"installByPlacement.enabled=false",
		"manager.extraArgs={--tunnel-health-interval=5s}",
	}, nil
}

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

// installOperator runs the README's helm install with HelmValues, then exposes the proxy-servers' agent port on the
// hub's node (EntrypointPort), where squid and 1st-cluster's forwarder send the agents.
func (s *System) installOperator(ctx context.Context) error {
	args := []string{"install", "-n", Namespace, "--create-namespace", "cluster-proxy", filepath.Join(testenv.RepoRoot(), "charts", "cluster-proxy"),
		"--kubeconfig", s.Hub.Kubeconfig}
	values, err := s.HelmValues()
	if err != nil {
		return err
	}
	for _, v := range values {
		args = append(args, "--set", v)
	}
	cmd := exec.CommandContext(ctx, s.opts.Helm, args...)
	// An isolated helm home: no repositories, no plugins, nothing written to the user's.
	home := s.path("helm")
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+home, "HELM_CACHE_HOME="+home, "HELM_DATA_HOME="+home)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("helm install: %w: %s", err, out)
	}
	mpc := &proxyv1alpha1.ManagedProxyConfiguration{ObjectMeta: metav1.ObjectMeta{Name: proxyv1alpha1.DefaultConfigurationName}}
	nodePort := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "proxy-agent-nodeport", Namespace: Namespace},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeNodePort,
			Selector: map[string]string{proxyv1alpha1.ComponentLabel: proxyv1alpha1.ComponentProxyServer,
				render.ConfigurationLabel: mpc.Name},
			Ports: []corev1.ServicePort{{Name: "agent", Port: 8091, TargetPort: intstr.FromInt32(8091), NodePort: EntrypointPort}},
		},
	}
	return testenv.CreateAll(ctx, s.HubClient, nodePort)
}

// installAddOns creates cluster1's AddOnDeploymentConfig (squid over TLS, with its CA) and the add-on on both
// clusters.
func (s *System) installAddOns(ctx context.Context) error {
	adc := &addonv1alpha1.AddOnDeploymentConfig{
		ObjectMeta: metav1.ObjectMeta{Name: ProxyConfigName, Namespace: ProxiedCluster},
		Spec: addonv1alpha1.AddOnDeploymentConfigSpec{ProxyConfig: addonv1alpha1.ProxyConfig{
			HTTPSProxy: s.Squid.TLSURL(), CABundle: s.Squid.CA(),
		}},
	}
	objs := []client.Object{adc}
	for _, name := range s.Clusters() {
		mca := &addonv1alpha1.ManagedClusterAddOn{ObjectMeta: metav1.ObjectMeta{Name: proxyv1alpha1.AddonName, Namespace: name}}
		if name == ProxiedCluster {
			mca.Spec.Configs = []addonv1alpha1.AddOnConfig{{
				ConfigGroupResource: addonv1alpha1.ConfigGroupResource{Group: "addon.open-cluster-management.io", Resource: "addondeploymentconfigs"},
				ConfigReferent:      addonv1alpha1.ConfigReferent{Namespace: ProxiedCluster, Name: ProxyConfigName},
			}}
		}
		objs = append(objs, mca)
	}
	return testenv.CreateAll(ctx, s.HubClient, objs...)
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

// ClusterStates reads the ClusterProxyStatus and ManagedClusterAddOn of each of clusters from the hub, sorted by name.
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
		mca := &addonv1alpha1.ManagedClusterAddOn{}
		if err := hub.Get(ctx, client.ObjectKey{Namespace: name, Name: proxyv1alpha1.AddonName}, mca); client.IgnoreNotFound(err) != nil {
			return nil, err
		}
		if cond := meta.FindStatusCondition(mca.Status.Conditions, addonv1alpha1.ManagedClusterAddOnConditionAvailable); cond != nil {
			st.AddOnAvailable = cond.Status
		}
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// waitAvailable waits until every cluster's tunnel is Available.
func (s *System) waitAvailable(ctx context.Context) error {
	if err := WaitAvailable(ctx, s.HubClient, s.Clusters(), s.opts.ReadyTimeout, s.opts.Log, nil); err != nil {
		return fmt.Errorf("%w; logs are in %s", err, s.opts.WorkDir)
	}
	return nil
}

// WaitAvailable waits, up to timeout, until the ClusterProxyStatus and ManagedClusterAddOn of each of clusters are
// Available, writing each cluster's state to log when it changes. check, when set, is called every round and ends
// the wait with its error (a component that died).
func WaitAvailable(ctx context.Context, hub client.Client, clusters []string, timeout time.Duration, log io.Writer, check func() error) error {
	deadline := time.Now().Add(timeout)
	last := map[string]string{}
	for {
		if check != nil {
			if err := check(); err != nil {
				return err
			}
		}
		states, err := ClusterStates(ctx, hub, clusters)
		if err != nil {
			return err
		}
		ready := true
		for _, st := range states {
			line := fmt.Sprintf("%s; ManagedClusterAddOn Available=%s", st.Status, st.AddOnAvailable)
			if last[st.Name] != line {
				fmt.Fprintf(log, "    %s: %s\n", st.Name, line)
				last[st.Name] = line
			}
			ready = ready && st.Available && st.AddOnAvailable == metav1.ConditionTrue
		}
		if ready {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not every cluster is Available after %s", timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second): // a person watches this: once a second is enough and cheap
		}
	}
}
