// Package helm tests the Helm chart charts/cluster-proxy with the helm binary 'make helm' installs in bin/: lint,
// golden renders, the values schema, and the rendered manifests applied to an envtest hub.
package helm

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/render"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/repo"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/testenv"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/ from the current chart")

const (
	releaseName = "cluster-proxy"
	namespace   = "open-cluster-management-addon"
	// mainCase is the value combination applied for real to the envtest hub; the others are applied as dry runs.
	mainCase = "hostname"
)

// cases are the value files in testdata/values; each has a golden render testdata/<name>.yaml.
var cases = []string{"default", "hostname", "loadbalancer", "manual"}

func root() string     { return repo.Root() }
func chartDir() string { return filepath.Join(root(), "charts", "cluster-proxy") }

// helmBin is bin/helm; 'make test' installs it (target helm), so a missing binary is a failure, not a skip.
func helmBin(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(root(), "bin", "helm")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s is missing: run 'make helm' (make test does): %v", bin, err)
	}
	return bin
}

// runHelm runs helm with an isolated home (no repositories, no plugins) and returns stdout, stderr and the error.
func runHelm(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	home := t.TempDir()
	cmd := exec.Command(helmBin(t), args...)
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
		"KUBECONFIG="+filepath.Join(home, "no-kubeconfig"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

func template(t *testing.T, extra ...string) (string, string, error) {
	args := append([]string{"template", releaseName, chartDir(), "--namespace", namespace}, extra...)
	return runHelm(t, args...)
}

func valuesFile(name string) string { return filepath.Join("testdata", "values", name+".yaml") }

// TestLint runs 'helm lint --strict' with the defaults and every value combination.
func TestLint(t *testing.T) {
	g := NewWithT(t)
	for _, c := range cases {
		out, errOut, err := runHelm(t, "lint", "--strict", chartDir(), "--namespace", namespace, "-f", valuesFile(c))
		g.Expect(err).NotTo(HaveOccurred(), "helm lint with %s:\n%s%s", c, out, errOut)
		g.Expect(out).To(ContainSubstring("0 chart(s) failed"), c)
	}
}

// TestTemplateGolden compares 'helm template' of every value combination with testdata/<name>.yaml (-update rewrites
// them).
func TestTemplateGolden(t *testing.T) {
	for _, c := range cases {
		t.Run(c, func(t *testing.T) {
			g := NewWithT(t)
			out, errOut, err := template(t, "-f", valuesFile(c))
			g.Expect(err).NotTo(HaveOccurred(), errOut)
			golden := filepath.Join("testdata", c+".yaml")
			if *update {
				g.Expect(os.WriteFile(golden, []byte(out), 0o644)).To(Succeed())
				return
			}
			want, err := os.ReadFile(golden)
			g.Expect(err).NotTo(HaveOccurred(), "run 'make test-helm HELM_TEST_ARGS=-update' to create it")
			g.Expect(out).To(Equal(string(want)), "the render of %s differs from %s: run 'make test-helm HELM_TEST_ARGS=-update' and review the diff", c, golden)
		})
	}
}

// The existing add-on's exposedServices value lists services that take requests without a token, after the chart's
// own entries.
func TestRendersTheAddonsExposedServicesAsTokenlessEntries(t *testing.T) {
	g := NewWithT(t)
	out, errOut, err := template(t, "--set", "userServer.enabled=true",
		"--set", "userServer.allowedServices[0].namespace=monitoring", "--set", "userServer.allowedServices[0].name=prometheus",
		"--set", "exposedServices[0].namespace=default", "--set", "exposedServices[0].service=hello-world",
		"--set", "exposedServices[0].port=8000", "--set", "exposedServices[0].protocol=http",
		"--set", "exposedServices[1].namespace=default", "--set", "exposedServices[1].service=hello-world-https")
	g.Expect(err).NotTo(HaveOccurred(), errOut)
	mpc := find(decode(t, out), "ManagedProxyConfiguration", "", "cluster-proxy")
	g.Expect(mpc).NotTo(BeNil())
	allowed, _, _ := unstructured.NestedSlice(mpc.Object, "spec", "userServer", "allowedServices")
	g.Expect(allowed).To(Equal([]any{
		map[string]any{"namespace": "monitoring", "name": "prometheus"},
		map[string]any{"namespace": "default", "name": "hello-world", "port": int64(8000), "callerAuthentication": "Service"},
		map[string]any{"namespace": "default", "name": "hello-world-https", "callerAuthentication": "Service"},
	}))

	out, errOut, err = template(t, "--set", "exposedServices[0].namespace=default", "--set", "exposedServices[0].service=web")
	g.Expect(err).NotTo(HaveOccurred(), errOut)
	_, hasUserServer, _ := unstructured.NestedMap(find(decode(t, out), "ManagedProxyConfiguration", "", "cluster-proxy").Object, "spec", "userServer")
	g.Expect(hasUserServer).To(BeFalse(), "only with userServer.enabled")
}

// TestRenderedValues checks what each combination means in the rendered objects, so a golden update that
// changes the meaning does not pass unnoticed.
func TestRenderedValues(t *testing.T) {
	type want struct {
		entrypoint, hostname, lbName string
		replicas, agentReplicas      int64
		userServer                   bool
		allowedServices              int // entries of spec.userServer.allowedServices
		strategy                     string
		placement                    string // namespace/name, "" for Manual
		chartPlacement               bool   // the chart renders Placement cluster-proxy-placement and the set binding
		managerImage, agentImage     string
		networkPolicies              bool
	}
	wants := map[string]want{
		"default": {entrypoint: "PortForward", replicas: 1, agentReplicas: 1, strategy: "Placements", placement: namespace + "/cluster-proxy-placement",
			chartPlacement: true, managerImage: "quay.io/cluster-proxy-operator/cluster-proxy-operator:v0.1.0",
			agentImage: "quay.io/cluster-proxy-operator/cluster-proxy-operator:v0.1.0"},
		"hostname": {entrypoint: "Hostname", hostname: "proxy-entrypoint.open-cluster-management-addon.svc", replicas: 3, agentReplicas: 3, userServer: true,
			allowedServices: 1, strategy: "Placements", placement: namespace + "/cluster-proxy-placement", chartPlacement: true,
			managerImage: "quay.io/cluster-proxy-operator/cluster-proxy-operator:v0.1.0",
			agentImage:   "quay.io/cluster-proxy-operator/cluster-proxy-operator:v0.1.0-agent", networkPolicies: true},
		"loadbalancer": {entrypoint: "LoadBalancerService", lbName: "proxy-agent-entrypoint", replicas: 1, agentReplicas: 2, strategy: "Placements",
			placement: "fleet/edge-clusters", managerImage: "quay.io/cluster-proxy-operator/cluster-proxy-operator:v0.1.0",
			agentImage: "quay.io/cluster-proxy-operator/cluster-proxy-operator:v0.1.0"},
		"manual": {entrypoint: "PortForward", replicas: 1, agentReplicas: 1, strategy: "Manual",
			managerImage: "registry.example.com:5000/ocm/cluster-proxy-operator:v0.2.0",
			agentImage:   "registry.example.com:5000/ocm/cluster-proxy-operator:v0.2.0"},
	}
	for _, c := range cases {
		t.Run(c, func(t *testing.T) {
			g := NewWithT(t)
			w := wants[c]
			out, errOut, err := template(t, "-f", valuesFile(c))
			g.Expect(err).NotTo(HaveOccurred(), errOut)
			objs := decode(t, out)

			mpc := find(objs, "ManagedProxyConfiguration", "", "cluster-proxy")
			g.Expect(mpc).NotTo(BeNil())
			str := func(o *unstructured.Unstructured, path ...string) string {
				v, _, _ := unstructured.NestedString(o.Object, path...)
				return v
			}
			num := func(o *unstructured.Unstructured, path ...string) int64 {
				v, _, _ := unstructured.NestedInt64(o.Object, path...)
				return v
			}
			g.Expect(str(mpc, "spec", "proxyServer", "entrypoint", "type")).To(Equal(w.entrypoint))
			g.Expect(str(mpc, "spec", "proxyServer", "entrypoint", "hostname", "value")).To(Equal(w.hostname))
			g.Expect(str(mpc, "spec", "proxyServer", "entrypoint", "loadBalancerService", "name")).To(Equal(w.lbName))
			g.Expect(str(mpc, "spec", "proxyServer", "namespace")).To(Equal(namespace))
			g.Expect(num(mpc, "spec", "proxyServer", "replicas")).To(Equal(w.replicas))
			g.Expect(num(mpc, "spec", "proxyAgent", "replicas")).To(Equal(w.agentReplicas))
			g.Expect(str(mpc, "spec", "proxyAgent", "image")).To(Equal(w.agentImage))
			_, hasUserServer, _ := unstructured.NestedMap(mpc.Object, "spec", "userServer")
			g.Expect(hasUserServer).To(Equal(w.userServer))
			allowed, _, _ := unstructured.NestedSlice(mpc.Object, "spec", "userServer", "allowedServices")
			g.Expect(allowed).To(HaveLen(w.allowedServices))

			cma := find(objs, "ClusterManagementAddOn", "", "cluster-proxy")
			g.Expect(cma).NotTo(BeNil())
			g.Expect(str(cma, "spec", "installStrategy", "type")).To(Equal(w.strategy))
			placements, _, _ := unstructured.NestedSlice(cma.Object, "spec", "installStrategy", "placements")
			if w.placement == "" {
				g.Expect(placements).To(BeEmpty())
			} else {
				g.Expect(placements).To(HaveLen(1))
				p := placements[0].(map[string]any)
				g.Expect(fmt.Sprintf("%s/%s", p["namespace"], p["name"])).To(Equal(w.placement))
			}
			g.Expect(find(objs, "Placement", namespace, "cluster-proxy-placement") != nil).To(Equal(w.chartPlacement))
			g.Expect(find(objs, "ManagedClusterSetBinding", namespace, "global") != nil).To(Equal(w.chartPlacement))

			dep := find(objs, "Deployment", namespace, "cluster-proxy-addon-manager")
			g.Expect(dep).NotTo(BeNil())
			containers, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
			g.Expect(containers).To(HaveLen(1))
			g.Expect(containers[0].(map[string]any)["image"]).To(Equal(w.managerImage))

			enabled, _, _ := unstructured.NestedBool(mpc.Object, "spec", "networkPolicies", "enabled")
			g.Expect(enabled).To(Equal(w.networkPolicies))
			policy := find(objs, "NetworkPolicy", namespace, "cluster-proxy-addon-manager")
			g.Expect(policy != nil).To(Equal(w.networkPolicies))
			if policy != nil {
				selector, _, _ := unstructured.NestedStringMap(policy.Object, "spec", "podSelector", "matchLabels")
				podLabels, _, _ := unstructured.NestedStringMap(dep.Object, "spec", "template", "metadata", "labels")
				g.Expect(labels.SelectorFromSet(selector).Matches(labels.Set(podLabels))).To(BeTrue(), "it selects the manager pods")
				// Every port the manager serves: its container ports and its probes'.
				served := map[int64]bool{}
				c := containers[0].(map[string]any)
				for _, p := range c["ports"].([]any) {
					served[p.(map[string]any)["containerPort"].(int64)] = true
				}
				for _, probe := range []string{"livenessProbe", "readinessProbe"} {
					port, _, _ := unstructured.NestedInt64(c, probe, "httpGet", "port")
					served[port] = true
				}
				rules, _, _ := unstructured.NestedSlice(policy.Object, "spec", "ingress")
				g.Expect(rules).To(HaveLen(1))
				admitted := map[int64]bool{}
				for _, p := range rules[0].(map[string]any)["ports"].([]any) {
					admitted[p.(map[string]any)["port"].(int64)] = true
				}
				g.Expect(admitted).To(Equal(served))
			}
		})
	}
}

// TestClusterManagementAddOnAsOperatorRenders proves the chart's ClusterManagementAddOn is the one the operator
// renders and takes over (render.ClusterManagementAddOn for the chart's ManagedProxyConfiguration): the same name,
// annotations (the self-managed lifecycle) and spec, apart from the fields users own (render.CMAUserOwnedFields,
// which the chart sets from its values). Labels and owner references are the installer's.
func TestClusterManagementAddOnAsOperatorRenders(t *testing.T) {
	for _, c := range cases {
		t.Run(c, func(t *testing.T) {
			g := NewWithT(t)
			out, errOut, err := template(t, "-f", valuesFile(c))
			g.Expect(err).NotTo(HaveOccurred(), errOut)
			objs := decode(t, out)
			chartMPC := find(objs, "ManagedProxyConfiguration", "", proxyv1alpha1.DefaultConfigurationName)
			g.Expect(chartMPC).NotTo(BeNil())
			mpc := &proxyv1alpha1.ManagedProxyConfiguration{}
			g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(chartMPC.Object, mpc)).To(Succeed())
			rendered, err := runtime.DefaultUnstructuredConverter.ToUnstructured(render.ClusterManagementAddOn(mpc))
			g.Expect(err).NotTo(HaveOccurred())

			chartCMA := find(objs, "ClusterManagementAddOn", "", proxyv1alpha1.AddonName)
			g.Expect(chartCMA).NotTo(BeNil(), "the chart renders ClusterManagementAddOn %s", proxyv1alpha1.AddonName)
			// Compared as typed objects without the user-owned fields, so defaults and empty fields mean the same.
			typed := func(o map[string]any) *addonv1alpha1.ClusterManagementAddOn {
				for _, path := range render.CMAUserOwnedFields {
					unstructured.RemoveNestedField(o, path...)
				}
				cma := &addonv1alpha1.ClusterManagementAddOn{}
				g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(o, cma)).To(Succeed())
				return cma
			}
			got, want := typed(chartCMA.Object), typed(rendered)

			g.Expect(got.Annotations).To(Equal(want.Annotations), "the chart's annotations differ from render.ClusterManagementAddOn")
			g.Expect(got.Spec).To(Equal(want.Spec), "the chart's spec differs from render.ClusterManagementAddOn")
		})
	}
}

// TestSameManagerAndRBACAsKustomize proves the chart installs the manager config/ describes: the ClusterRole has
// exactly the rules controller-gen generated (config/rbac/role.yaml), the leader-election Role the rules of
// config/rbac, and the manager container the command, args, probes, ports and security of config/manager.
func TestSameManagerAndRBACAsKustomize(t *testing.T) {
	g := NewWithT(t)
	out, errOut, err := template(t)
	g.Expect(err).NotTo(HaveOccurred(), errOut)
	objs := decode(t, out)

	rules := func(o *unstructured.Unstructured) []any {
		r, _, _ := unstructured.NestedSlice(o.Object, "rules")
		return r
	}
	kustomize := decodeFile(t, filepath.Join(root(), "config", "rbac", "role.yaml"))
	g.Expect(kustomize).To(HaveLen(2), "a ClusterRole and the Role of the proxy-servers' namespace")
	role := find(objs, "ClusterRole", "", "cluster-proxy-manager")
	g.Expect(role).NotTo(BeNil())
	g.Expect(rules(role)).To(Equal(rules(find(kustomize, "ClusterRole", "", "cluster-proxy-manager"))),
		"the chart's ClusterRole differs from config/rbac/role.yaml: run 'make manifests'")
	nsRole := find(objs, "Role", namespace, "cluster-proxy-manager")
	g.Expect(nsRole).NotTo(BeNil(), "the manager's Role in the release namespace, the proxy-servers'")
	g.Expect(rules(nsRole)).To(Equal(rules(find(kustomize, "Role", "system", "cluster-proxy-manager"))),
		"the chart's Role differs from config/rbac/role.yaml: run 'make manifests'")
	g.Expect(find(objs, "Role", "default", "cluster-proxy-manager-certificates")).To(BeNil(), "no certificate namespaces unless asked")

	leader := decodeFile(t, filepath.Join(root(), "config", "rbac", "leader_election_role.yaml"))
	chartLeader := find(objs, "Role", namespace, "cluster-proxy-leader-election")
	g.Expect(chartLeader).NotTo(BeNil())
	g.Expect(rules(chartLeader)).To(Equal(rules(find(leader, "Role", "system", "cluster-proxy-leader-election"))))

	for _, b := range []*unstructured.Unstructured{
		find(objs, "ClusterRoleBinding", "", "cluster-proxy-manager"),
		find(objs, "RoleBinding", namespace, "cluster-proxy-manager"),
		find(objs, "RoleBinding", namespace, "cluster-proxy-leader-election"),
	} {
		g.Expect(b).NotTo(BeNil())
		subjects, _, _ := unstructured.NestedSlice(b.Object, "subjects")
		g.Expect(subjects).To(ConsistOf(map[string]any{"kind": "ServiceAccount", "name": "cluster-proxy-addon-manager", "namespace": namespace}))
	}
	g.Expect(find(objs, "ServiceAccount", namespace, "cluster-proxy-addon-manager")).NotTo(BeNil())

	manager := find(decodeFile(t, filepath.Join(root(), "config", "manager", "manager.yaml")), "Deployment", "system", "cluster-proxy-addon-manager")
	g.Expect(manager).NotTo(BeNil())
	chartManager := find(objs, "Deployment", namespace, "cluster-proxy-addon-manager")
	g.Expect(chartManager).NotTo(BeNil())
	container := func(o *unstructured.Unstructured) map[string]any {
		cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		g.Expect(cs).To(HaveLen(1))
		return cs[0].(map[string]any)
	}
	want, got := container(manager), container(chartManager)
	for _, k := range []string{"name", "command", "args", "ports", "livenessProbe", "readinessProbe", "resources", "securityContext"} {
		g.Expect(got[k]).To(Equal(want[k]), "container field %s differs from config/manager/manager.yaml", k)
	}
	for _, path := range [][]string{{"spec", "template", "spec", "securityContext"}, {"spec", "template", "spec", "serviceAccountName"}, {"spec", "selector"}} {
		w, _, _ := unstructured.NestedFieldNoCopy(manager.Object, path...)
		gv, _, _ := unstructured.NestedFieldNoCopy(chartManager.Object, path...)
		g.Expect(gv).To(Equal(w), "%v differs from config/manager/manager.yaml", path)
	}
}

// TestCertificateNamespacesGetASecretsRoleAndTheFlag: each namespace of manager.proxyCertificateNamespaces gets a Role
// for Secrets only, bound to the manager, and the manager is told of them; the release namespace needs none.
func TestCertificateNamespacesGetASecretsRoleAndTheFlag(t *testing.T) {
	g := NewWithT(t)
	out, errOut, err := template(t, "--set", "manager.proxyCertificateNamespaces={team-a,"+namespace+"}")
	g.Expect(err).NotTo(HaveOccurred(), errOut)
	objs := decode(t, out)
	role := find(objs, "Role", "team-a", "cluster-proxy-manager-certificates")
	g.Expect(role).NotTo(BeNil())
	rules, _, _ := unstructured.NestedSlice(role.Object, "rules")
	g.Expect(rules).To(Equal([]any{map[string]any{"apiGroups": []any{""}, "resources": []any{"secrets"},
		"verbs": []any{"create", "delete", "get", "list", "patch", "update", "watch"}}}), "Secrets, and nothing else")
	binding := find(objs, "RoleBinding", "team-a", "cluster-proxy-manager-certificates")
	g.Expect(binding).NotTo(BeNil())
	subjects, _, _ := unstructured.NestedSlice(binding.Object, "subjects")
	g.Expect(subjects).To(ConsistOf(map[string]any{"kind": "ServiceAccount", "name": "cluster-proxy-addon-manager", "namespace": namespace}))
	g.Expect(find(objs, "Role", namespace, "cluster-proxy-manager-certificates")).To(BeNil(), "the manager's Role covers its own namespace")
	args, _, _ := unstructured.NestedSlice(find(objs, "Deployment", namespace, "cluster-proxy-addon-manager").Object,
		"spec", "template", "spec", "containers")
	g.Expect(args[0].(map[string]any)["args"]).To(ContainElement("--proxy-certificate-namespaces=team-a," + namespace))

	_, errOut, err = template(t, "--set", "manager.proxyCertificateNamespaces={Team_A}")
	g.Expect(err).To(HaveOccurred())
	g.Expect(errOut).To(ContainSubstring("proxyCertificateNamespaces"))
}

// TestCRDsMatchConfig fails when charts/cluster-proxy/crds, files/manager-role.yaml or files/leader-election-role.yaml
// differ from config/ ('make manifests' copies them).
func TestCRDsMatchConfig(t *testing.T) {
	g := NewWithT(t)
	names := func(dir string) []string {
		entries, err := os.ReadDir(dir)
		g.Expect(err).NotTo(HaveOccurred())
		var out []string
		for _, e := range entries {
			out = append(out, e.Name())
		}
		sort.Strings(out)
		return out
	}
	bases := filepath.Join(root(), "config", "crd", "bases")
	chartCRDs := filepath.Join(chartDir(), "crds")
	g.Expect(names(chartCRDs)).To(Equal(names(bases)), "charts/cluster-proxy/crds is stale: run 'make manifests'")
	g.Expect(names(bases)).NotTo(BeEmpty())
	same := func(a, b string) {
		x, err := os.ReadFile(a)
		g.Expect(err).NotTo(HaveOccurred())
		y, err := os.ReadFile(b)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(string(y)).To(Equal(string(x)), "%s differs from %s: run 'make manifests'", b, a)
	}
	for _, n := range names(bases) {
		same(filepath.Join(bases, n), filepath.Join(chartCRDs, n))
	}
	same(filepath.Join(root(), "config", "rbac", "role.yaml"), filepath.Join(chartDir(), "files", "manager-role.yaml"))
	same(filepath.Join(root(), "config", "rbac", "leader_election_role.yaml"), filepath.Join(chartDir(), "files", "leader-election-role.yaml"))
}

// TestSchemaRejectsBadValues: helm refuses values the schema forbids, and the error names the field.
func TestSchemaRejectsBadValues(t *testing.T) {
	bad := []struct {
		name  string
		args  []string
		field string
	}{
		{"negative replicas", []string{"--set", "replicas=-1"}, "at '/replicas': minimum"},
		{"replicas not a number", []string{"--set-string", "replicas=three"}, "at '/replicas'"},
		{"negative manager replicas", []string{"--set", "manager.replicas=-2"}, "at '/manager/replicas': minimum"},
		{"unknown entrypoint type", []string{"--set", "proxyServer.entrypointType=Ingress"}, "at '/proxyServer/entrypointType': value must be one of"},
		{"Hostname without an address", []string{"--set", "proxyServer.entrypointType=Hostname"}, "at '/proxyServer/entrypointAddress'"},
		{"port out of range", []string{"--set", "proxyServer.port=70000"}, "at '/proxyServer/port': maximum"},
		{"port not a number", []string{"--set-string", "proxyServer.port=http"}, "at '/proxyServer/port'"},
		{"load balancer flag not a boolean", []string{"--set-string", "proxyServer.entrypointLoadBalancer=yes"}, "at '/proxyServer/entrypointLoadBalancer'"},
		{"user server flag not a boolean", []string{"--set-string", "userServer.enabled=yes"}, "at '/userServer/enabled'"},
		{"allowed service without a name", []string{"--set", "userServer.allowedServices[0].namespace=monitoring"}, "at '/userServer/allowedServices/0': missing property 'name'"},
		{"allowed service port out of range", []string{"--set", "userServer.allowedServices[0].namespace=m", "--set", "userServer.allowedServices[0].name=p",
			"--set", "userServer.allowedServices[0].port=0"}, "at '/userServer/allowedServices/0/port': minimum"},
		{"addon exposed service without a service", []string{"--set", "exposedServices[0].namespace=default"}, "at '/exposedServices/0': missing property 'service'"},
		{"addon exposed service of another protocol", []string{"--set", "exposedServices[0].namespace=default", "--set", "exposedServices[0].service=web",
			"--set", "exposedServices[0].protocol=grpc"}, "at '/exposedServices/0/protocol'"},
		{"zero agent replicas", []string{"--set", "proxyAgent.replicas=0"}, "at '/proxyAgent/replicas': minimum"},
		{"unknown pull policy", []string{"--set", "image.pullPolicy=Sometimes"}, "at '/image/pullPolicy'"},
		{"bad placement name", []string{"--set", "installByPlacement.placementName=Not_A_Name"}, "at '/installByPlacement/placementName'"},
		{"misspelled value", []string{"--set", "proxyServer.entrypointAdress=x.example.com"}, "additional properties 'entrypointAdress' not allowed"},
		{"unknown top-level value", []string{"--set", "replica=2"}, "additional properties 'replica' not allowed"},
		{"proxy-server resources with an unknown key", []string{"--set", "proxyServer.resources.request.cpu=1"}, "at '/proxyServer/resources'"},
		{"agent resources with a quantity that is not one", []string{"--set", "proxyAgent.resources.limits.memory=lots"}, "at '/proxyAgent/resources"},
	}
	for _, b := range bad {
		t.Run(b.name, func(t *testing.T) {
			g := NewWithT(t)
			out, errOut, err := template(t, b.args...)
			g.Expect(err).To(HaveOccurred(), "helm accepted %v:\n%s", b.args, out)
			var exit *exec.ExitError
			g.Expect(errors.As(err, &exit)).To(BeTrue())
			g.Expect(errOut).To(ContainSubstring("values don't meet the specifications of the schema"))
			g.Expect(errOut).To(ContainSubstring(b.field))
		})
	}
}

// TestAppliedToHub applies the rendered manifests with server-side apply to an envtest hub that has the OCM CRDs
// but not ours: the chart's CRDs first, then the rest of the main combination for real, then every other
// combination as a server-side dry run. The API server validates all of it (OpenAPI schemas, CEL rules of the
// ManagedProxyConfiguration, strict field validation).
func TestAppliedToHub(t *testing.T) {
	g := NewWithT(t)
	_, c := startHub(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// helm install --create-namespace creates the release namespace; fleet holds the loadbalancer case's Placement;
	// team-a is the main case's ProxyCertificate namespace, which must exist before the install.
	for _, ns := range []string{namespace, "fleet", "team-a"} {
		g.Expect(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	}
	apply := func(o *unstructured.Unstructured, opts ...client.ApplyOption) error {
		opts = append(opts, client.FieldOwner("helm"), client.ForceOwnership)
		return c.Apply(ctx, client.ApplyConfigurationFromUnstructured(o), opts...)
	}

	out, errOut, err := template(t, "--include-crds", "-f", valuesFile(mainCase))
	g.Expect(err).NotTo(HaveOccurred(), errOut)
	var crds, rest []*unstructured.Unstructured
	for _, o := range decode(t, out) {
		if o.GetKind() == "CustomResourceDefinition" {
			crds = append(crds, o)
		} else {
			rest = append(rest, o)
		}
	}
	g.Expect(crds).To(HaveLen(3))
	for _, crd := range crds {
		g.Expect(apply(crd)).To(Succeed(), "CRD %s", crd.GetName())
	}
	for _, crd := range crds {
		established, cancel := context.WithTimeout(ctx, 30*time.Second)
		g.Expect(testenv.WaitEstablished(established, c, crd.GetName())).To(Succeed())
		cancel()
	}

	kinds := map[string]bool{}
	for _, o := range rest {
		kinds[o.GetKind()] = true
		// The API server may need a moment to serve a new CRD's resource after it is Established.
		g.Eventually(func() error { return apply(o) }).WithContext(ctx).WithTimeout(20*time.Second).WithPolling(200*time.Millisecond).
			Should(Succeed(), "%s %s/%s", o.GetKind(), o.GetNamespace(), o.GetName())
	}
	g.Expect(kinds).To(HaveKey("ManagedProxyConfiguration"))
	g.Expect(kinds).To(HaveKey("Deployment"))
	g.Expect(kinds).To(HaveKey("ClusterRole"))
	g.Expect(kinds).To(HaveKey("ClusterManagementAddOn"))
	g.Expect(kinds).To(HaveKey("Placement"))

	// The live objects carry what was applied: the MPC's defaults come from our CRD.
	mpc := &unstructured.Unstructured{}
	mpc.SetAPIVersion("proxy.open-cluster-management.io/v1alpha1")
	mpc.SetKind("ManagedProxyConfiguration")
	g.Expect(c.Get(ctx, client.ObjectKey{Name: "cluster-proxy"}, mpc)).To(Succeed())
	entry, _, _ := unstructured.NestedString(mpc.Object, "spec", "proxyServer", "entrypoint", "hostname", "value")
	g.Expect(entry).To(Equal("proxy-entrypoint.open-cluster-management-addon.svc"))

	for _, other := range cases {
		if other == mainCase {
			continue
		}
		out, errOut, err := template(t, "-f", valuesFile(other))
		g.Expect(err).NotTo(HaveOccurred(), errOut)
		for _, o := range decode(t, out) {
			g.Expect(apply(o, client.DryRunAll)).To(Succeed(), "%s: %s %s/%s", other, o.GetKind(), o.GetNamespace(), o.GetName())
		}
	}

	// The CEL rules of our CRD are in force: a Hostname entrypoint without a hostname is refused by the server.
	// (Apply wrote the server's answer into the objects of rest, so decode the render again.)
	bad := find(decode(t, out), "ManagedProxyConfiguration", "", "cluster-proxy")
	g.Expect(unstructured.SetNestedField(bad.Object, map[string]any{"type": "Hostname", "hostname": map[string]any{"value": ""}},
		"spec", "proxyServer", "entrypoint")).To(Succeed())
	err = apply(bad, client.DryRunAll)
	g.Expect(err).To(HaveOccurred())
	g.Expect(err.Error()).To(ContainSubstring("entrypoint.hostname.value is required"))
}

// TestHelmInstall runs what users run against an envtest hub with the OCM CRDs: the README's 'helm install -n
// open-cluster-management-addon --create-namespace cluster-proxy charts/cluster-proxy --set
// proxyServer.entrypointAddress=proxy.example.com' (CRDs from crds/, then the templates), 'helm upgrade' to the main
// value combination and then to the Manual install strategy, and 'helm uninstall'.
func TestHelmInstall(t *testing.T) {
	g := NewWithT(t)
	env, c := startHub(t)
	kcPath, err := testenv.AdminKubeconfig(env, "helm-user", filepath.Join(t.TempDir(), "kubeconfig"))
	g.Expect(err).NotTo(HaveOccurred())
	helm := func(args ...string) {
		t.Helper()
		out, errOut, err := runHelm(t, append(args, "--kubeconfig", kcPath)...)
		g.Expect(err).NotTo(HaveOccurred(), "helm %v:\n%s%s", args, out, errOut)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The main case's ProxyCertificate namespace, which must exist before its upgrade.
	g.Expect(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}})).To(Succeed())

	helm("install", "-n", namespace, "--create-namespace", releaseName, chartDir(), "--set", "proxyServer.entrypointAddress=proxy.example.com")
	mpc := &unstructured.Unstructured{}
	mpc.SetAPIVersion("proxy.open-cluster-management.io/v1alpha1")
	mpc.SetKind("ManagedProxyConfiguration")
	entrypoint := func() (string, string) {
		g.Expect(c.Get(ctx, client.ObjectKey{Name: "cluster-proxy"}, mpc)).To(Succeed())
		typ, _, _ := unstructured.NestedString(mpc.Object, "spec", "proxyServer", "entrypoint", "type")
		host, _, _ := unstructured.NestedString(mpc.Object, "spec", "proxyServer", "entrypoint", "hostname", "value")
		return typ, host
	}
	typ, host := entrypoint()
	g.Expect(typ).To(Equal("Hostname"))
	g.Expect(host).To(Equal("proxy.example.com"))
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "cluster-proxy-addon-manager"}, &appsv1.Deployment{})).To(Succeed())
	g.Expect(c.Get(ctx, client.ObjectKey{Name: "cluster-proxy-manager"}, &rbacv1.ClusterRole{})).To(Succeed())
	cma := &unstructured.Unstructured{}
	cma.SetAPIVersion("addon.open-cluster-management.io/v1alpha1")
	cma.SetKind("ClusterManagementAddOn")
	strategy := func() string {
		g.Expect(c.Get(ctx, client.ObjectKey{Name: "cluster-proxy"}, cma)).To(Succeed())
		v, _, _ := unstructured.NestedString(cma.Object, "spec", "installStrategy", "type")
		return v
	}
	g.Expect(strategy()).To(Equal("Placements"))

	helm("upgrade", "-n", namespace, releaseName, chartDir(), "-f", valuesFile(mainCase))
	_, host = entrypoint()
	g.Expect(host).To(Equal("proxy-entrypoint.open-cluster-management-addon.svc"))

	helm("upgrade", "-n", namespace, releaseName, chartDir(), "-f", valuesFile("manual"))
	g.Expect(strategy()).To(Equal("Manual"))

	helm("uninstall", "-n", namespace, releaseName)
	err = c.Get(ctx, client.ObjectKey{Name: "cluster-proxy"}, mpc)
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the MPC outlived 'helm uninstall': %v", err)
	// Helm keeps the CRDs of crds/ on uninstall, so the users' resources survive.
	g.Expect(c.Get(ctx, client.ObjectKey{Name: "managedproxyconfigurations.proxy.open-cluster-management.io"},
		&apiextensionsv1.CustomResourceDefinition{})).To(Succeed())
}

// startHub starts an envtest hub with the OCM hub CRDs but not ours (the chart brings them), and a client with
// strict field validation.
func startHub(t *testing.T) (*envtest.Environment, client.Client) {
	t.Helper()
	g := NewWithT(t)
	env, err := testenv.NewOCMHub()
	g.Expect(err).NotTo(HaveOccurred())
	cfg, err := env.Start()
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = env.Stop() })
	c, err := testenv.StrictClient(cfg)
	g.Expect(err).NotTo(HaveOccurred())
	return env, c
}

// decode splits a multi-document YAML stream into objects, skipping empty documents.
func decode(t *testing.T, stream string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := testenv.DecodeObjects(strings.NewReader(stream))
	if err != nil {
		t.Fatalf("decode YAML: %v", err)
	}
	return objs
}

func decodeFile(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return decode(t, string(b))
}

func find(objs []*unstructured.Unstructured, kind, ns, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetNamespace() == ns && o.GetName() == name {
			return o
		}
	}
	return nil
}
