package localsystem

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	addonv1beta1 "open-cluster-management.io/api/addon/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/ociimage"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/process"
)

// AddOnOptions install the existing OCM cluster-proxy add-on in place of the operator, from its own chart and an
// image built from its published source, as a hub that runs it today has it: the start of the migration suite.
type AddOnOptions struct {
	// Source is a checkout of github.com/open-cluster-management-io/cluster-proxy at v0.11.0; its vendor folder
	// builds its programs without the network.
	Source string
}

// The existing add-on as the local system installs it.
const (
	// AddOnImage is the name the add-on's chart composes by default for v0.11.0 (registry, image, tag): its manager,
	// user-server, agents and proxy-servers all run it.
	AddOnImage = "quay.io/open-cluster-management/cluster-proxy:v0.11.0"
	// ANPVersion is the apiserver-network-proxy release whose proxy-server and proxy-agent the add-on's image holds.
	ANPVersion = "v0.36.0"
)

// AddOnValues are the values the local system installs the add-on's chart with, as its user keeps them in a values
// file: its image under its default name, the entrypoint the agents dial, the service-proxy and user-server on, and
// the chart's own Placement (every cluster of the global set), so OCM creates each cluster's ManagedClusterAddOn.
func AddOnValues() map[string]any {
	return map[string]any{
		"registry": "quay.io/open-cluster-management", "image": "cluster-proxy", "tag": "v0.11.0",
		"proxyServerImage": "quay.io/open-cluster-management/cluster-proxy", "proxyAgentImage": "quay.io/open-cluster-management/cluster-proxy",
		"proxyServer":        map[string]any{"entrypointAddress": EntrypointHost, "port": EntrypointPort},
		"enableServiceProxy": true,
		"userServer":         map[string]any{"enabled": true},
	}
}

// WriteValues writes Helm values to path as YAML, a values file to give helm with -f.
func WriteValues(path string, values map[string]any) error {
	data, err := yaml.Marshal(values)
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o600)
}

// addOnImage builds the add-on's image from Options.AddOn.Source, as its Dockerfile does: its three programs (the
// manager with the agent image's name built in) and apiserver-network-proxy's proxy-server and proxy-agent, all at /,
// run as 65532, with no entrypoint (its Deployments name the program).
func (s *System) addOnImage(ctx context.Context) (string, error) {
	out := s.path("addon-build")
	if err := os.MkdirAll(out, 0o755); err != nil {
		return "", err
	}
	src := s.opts.AddOn.Source
	builds := []struct{ name, pkg, ldflags string }{
		{"agent", "./cmd/addon-agent", ""},
		{"manager", "./cmd/addon-manager", "-X open-cluster-management.io/cluster-proxy/pkg/config.AgentImageName=" + AddOnImage},
		{"cluster-proxy", "./cmd/cluster-proxy", ""},
	}
	for _, b := range builds {
		args := []string{"build", "-mod=vendor", "-trimpath", "-o", filepath.Join(out, b.name)}
		if b.ldflags != "" {
			args = append(args, "-ldflags", b.ldflags)
		}
		if err := goCommand(ctx, src, append(args, b.pkg)...); err != nil {
			return "", fmt.Errorf("build the add-on's %s from %s: %w", b.name, src, err)
		}
	}
	if err := s.buildANP(ctx, out); err != nil {
		return "", err
	}
	var files []ociimage.File
	for _, name := range []string{"agent", "manager", "cluster-proxy", "proxy-server", "proxy-agent"} {
		f, err := ociimage.Copy(name, 0o755, filepath.Join(out, name))
		if err != nil {
			return "", err
		}
		files = append(files, f)
	}
	img, err := ociimage.Build(v1.Config{User: "65532:65532", WorkingDir: "/"}, ociimage.Step{Files: files, CreatedBy: "the add-on v0.11.0 and apiserver-network-proxy " + ANPVersion})
	if err != nil {
		return "", err
	}
	path := s.path("images", "addon.tar")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", err
	}
	return path, ociimage.WriteArchive(path, AddOnImage, img)
}

// buildANP builds apiserver-network-proxy's proxy-server and proxy-agent at ANPVersion into out, from a module of
// their own (ANP's go.mod replaces its client by a folder, so 'go install pkg@version' refuses it).
func (s *System) buildANP(ctx context.Context, out string) error {
	mod := s.path("anp-build")
	if err := os.MkdirAll(mod, 0o755); err != nil {
		return err
	}
	goMod := fmt.Sprintf("module anpbuild\n\ngo 1.26\n\nrequire (\n\tsigs.k8s.io/apiserver-network-proxy %[1]s\n\tsigs.k8s.io/apiserver-network-proxy/konnectivity-client %[1]s\n)\n", ANPVersion)
	if err := os.WriteFile(filepath.Join(mod, "go.mod"), []byte(goMod), 0o644); err != nil {
		return err
	}
	for name, pkg := range map[string]string{"proxy-server": "sigs.k8s.io/apiserver-network-proxy/cmd/server", "proxy-agent": "sigs.k8s.io/apiserver-network-proxy/cmd/agent"} {
		if err := goCommand(ctx, mod, "get", pkg+"@"+ANPVersion); err != nil {
			return err
		}
		if err := goCommand(ctx, mod, "build", "-trimpath", "-o", filepath.Join(out, name), pkg); err != nil {
			return fmt.Errorf("build apiserver-network-proxy's %s %s: %w", name, ANPVersion, err)
		}
	}
	return nil
}

// goCommand runs go in dir, static and outside any workspace, with this module's GOFLAGS left out.
func goCommand(ctx context.Context, dir string, args ...string) error {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GOFLAGS=")
	_, err := process.Output(cmd, "go "+strings.Join(args, " "))
	return err
}

// installAddOn runs the add-on's own helm install (its chart in Options.AddOn.Source) with a values file of
// AddOnValues, then exposes its proxy-servers and user-server on the hub's node as for the operator.
func (s *System) installAddOn(ctx context.Context) error {
	values := s.path("addon-values.yaml")
	if err := WriteValues(values, AddOnValues()); err != nil {
		return err
	}
	if _, err := s.Helm(ctx, "install", "-n", Namespace, "--create-namespace", "cluster-proxy",
		filepath.Join(s.opts.AddOn.Source, "charts", "cluster-proxy"), "-f", values); err != nil {
		return err
	}
	return s.exposeProxyServers(ctx)
}

// addOnUserServerSelector selects the add-on's user-server pods, which its Service cluster-proxy-addon-user selects.
var addOnUserServerSelector = map[string]string{"open-cluster-management.io/addon": "cluster-proxy", "component": "cluster-proxy-addon-user"}

// FollowUserServerService points the machine's NodePort of the user-server at the pods the in-cluster Service
// cluster-proxy-addon-user selects now, as kube-proxy would for a client in the hub: the add-on's user-server pods
// before a migration, the operator's proxy-servers after it. It reports whether it changed the NodePort.
func (s *System) FollowUserServerService(ctx context.Context) (bool, error) {
	svc, machine := &corev1.Service{}, &corev1.Service{}
	if err := s.HubClient.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: proxyv1alpha1.UserServerServiceName}, svc); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	if err := s.HubClient.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: UserServerNodePortName}, machine); err != nil {
		return false, err
	}
	if len(svc.Spec.Selector) == 0 || maps.Equal(svc.Spec.Selector, machine.Spec.Selector) {
		return false, nil
	}
	machine.Spec.Selector = svc.Spec.Selector
	return true, s.HubClient.Update(ctx, machine)
}

// UserServerNodePortName is the NodePort Service by which programs on the machine reach the user-server.
const UserServerNodePortName = "user-server-machine-nodeport"

// addOnAvailable reports whether OCM says the add-on is Available on cluster (its ManagedClusterAddOn: the add-on
// has no ClusterProxyStatus).
func (s *System) addOnAvailable(ctx context.Context, cluster string) (bool, string, error) {
	mca := &addonv1beta1.ManagedClusterAddOn{}
	if err := s.HubClient.Get(ctx, client.ObjectKey{Namespace: cluster, Name: proxyv1alpha1.AddonName}, mca); err != nil {
		return false, "", client.IgnoreNotFound(err)
	}
	cond := meta.FindStatusCondition(mca.Status.Conditions, addonv1beta1.ManagedClusterAddOnConditionAvailable)
	if cond == nil {
		return false, "ManagedClusterAddOn Available=Unknown", nil
	}
	return cond.Status == metav1.ConditionTrue, fmt.Sprintf("ManagedClusterAddOn Available=%s (%s)", cond.Status, cond.Reason), nil
}

// waitAddOnAvailable waits until OCM reports the add-on Available on every managed cluster, writing each cluster's
// state to the log when it changes.
func (s *System) waitAddOnAvailable(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.opts.ReadyTimeout)
	defer cancel()
	last := map[string]string{}
	for {
		all := true
		for _, c := range s.Clusters() {
			ok, line, err := s.addOnAvailable(ctx, c)
			if err != nil {
				return err
			}
			if last[c] != line {
				fmt.Fprintf(s.opts.Log, "    %s: %s\n", c, line)
				last[c] = line
			}
			all = all && ok
		}
		if all {
			return nil
		}
		select {
		case <-ctx.Done():
			if _, err := s.SaveHubState(context.Background()); err != nil {
				fmt.Fprintf(s.opts.Log, "    saving the hub's objects: %v\n", err)
			}
			return fmt.Errorf("the add-on is not Available on every cluster after %s; logs and the hub's objects are in %s", s.opts.ReadyTimeout, s.opts.WorkDir)
		case <-time.After(time.Second):
		}
	}
}
