// Package kustomize tests the kustomize install: the README's 'kustomize build config/default | kubectl apply
// --server-side -f -' runs against an envtest hub, config/default and config/samples build, and the real
// kube-apiserver accepts the result applied server-side with strict field validation, CRDs first.
package kustomize

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/process"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/repo"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/testenv"
)

const fieldOwner = client.FieldOwner("kustomize-install-test")

// build runs bin/kustomize build on a folder of config/ and returns its objects.
func build(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	root := repo.Root()
	bin := filepath.Join(root, "bin", "kustomize")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s is missing: run 'make kustomize' (make test does)", bin)
	}
	out, err := process.Output(exec.Command(bin, "build", filepath.Join(root, "config", dir)), "kustomize build config/"+dir)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := testenv.DecodeObjects(strings.NewReader(out))
	if err != nil {
		t.Fatalf("kustomize build config/%s: output: %v", dir, err)
	}
	return objs
}

func TestKustomizeInstall(t *testing.T) {
	objs := build(t, "default")
	samples := build(t, "samples")

	// What config/default must hold: the three CRDs, the namespace, RBAC and the manager, all namespaced objects in
	// open-cluster-management-addon and the image replaced.
	kinds := map[string]int{}
	var crds, rest []*unstructured.Unstructured
	for _, o := range objs {
		kinds[o.GetKind()]++
		switch o.GetKind() {
		case "CustomResourceDefinition":
			crds = append(crds, o)
		case "Namespace":
			rest = append([]*unstructured.Unstructured{o}, rest...) // namespace before what lives in it
		default:
			rest = append(rest, o)
		}
		if o.GetNamespace() != "" && o.GetNamespace() != "open-cluster-management-addon" {
			t.Errorf("%s %s is in namespace %s; want open-cluster-management-addon", o.GetKind(), o.GetName(), o.GetNamespace())
		}
		if o.GetKind() == "Namespace" && o.GetName() != "open-cluster-management-addon" {
			t.Errorf("namespace %s; want open-cluster-management-addon", o.GetName())
		}
		if o.GetKind() == "Deployment" {
			containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
			for _, c := range containers {
				if img, _ := c.(map[string]any)["image"].(string); !strings.HasPrefix(img, "quay.io/cluster-proxy-operator/cluster-proxy-operator:") {
					t.Errorf("manager image %q: the kustomize image replacement did not apply", img)
				}
			}
		}
	}
	for kind, n := range map[string]int{"CustomResourceDefinition": 3, "Namespace": 1, "ServiceAccount": 1, "ClusterRole": 1,
		"ClusterRoleBinding": 1, "Role": 2, "RoleBinding": 2, "Deployment": 1} { // Roles: the manager's and leader election's
		if kinds[kind] != n {
			t.Errorf("config/default has %d %s; want %d", kinds[kind], kind, n)
		}
	}

	// A hub with the OCM CRDs only: the operator's CRDs come from the kustomize output.
	env, err := testenv.NewOCMHub()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start envtest hub: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	// Strict: a field the API server does not know is an error, not a warning.
	c, err := testenv.StrictClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	apply := func(o *unstructured.Unstructured) error {
		return c.Apply(ctx, client.ApplyConfigurationFromUnstructured(o.DeepCopy()), fieldOwner, client.ForceOwnership)
	}

	// First the README's command itself, with the real kubectl: 'kustomize build config/default | kubectl apply
	// --server-side -f -'. The checks below then apply the same objects with strict field validation.
	readmeInstall(t, env)
	for _, o := range objs {
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(o.GroupVersionKind())
		if err := c.Get(ctx, client.ObjectKeyFromObject(o), got); err != nil {
			t.Fatalf("after the README's install, %s %s/%s: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
		}
		if o.GetKind() == "Deployment" && !appliedBy(got, "kubectl") {
			t.Errorf("the manager Deployment was not applied by 'kubectl apply --server-side': %v", got.GetManagedFields())
		}
	}

	for _, o := range crds {
		if err := apply(o); err != nil {
			t.Fatalf("apply CRD %s: %v", o.GetName(), err)
		}
	}
	for _, o := range crds {
		if err := testenv.WaitEstablished(ctx, c, o.GetName()); err != nil {
			t.Fatal(err)
		}
	}
	for _, o := range rest {
		if err := apply(o); err != nil {
			t.Errorf("apply %s %s/%s: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
		}
	}
	// The samples are accepted by the CRDs just installed (the API may take a moment to serve a new resource).
	for _, o := range samples {
		var err error
		for range 50 {
			if err = apply(o); err == nil || !strings.Contains(err.Error(), "no matches for kind") {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			t.Errorf("apply sample %s %s/%s: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
		}
	}
	if t.Failed() {
		return
	}

	// Everything is there, as applied.
	for _, o := range append(append(crds, rest...), samples...) {
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(o.GroupVersionKind())
		if err := c.Get(ctx, client.ObjectKeyFromObject(o), got); err != nil {
			t.Errorf("get %s %s/%s: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
		}
	}
	// Applying again is a no-op that succeeds (what a second 'kubectl apply --server-side' does).
	for _, o := range rest {
		if err := apply(o); err != nil {
			t.Errorf("re-apply %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}

	// The check has teeth: the same API server refuses a Deployment with a field it does not know.
	for _, o := range rest {
		if o.GetKind() != "Deployment" {
			continue
		}
		bad := o.DeepCopy()
		if err := unstructured.SetNestedField(bad.Object, "x", "spec", "template", "spec", "notAField"); err != nil {
			t.Fatal(err)
		}
		if err := apply(bad); err == nil || !strings.Contains(err.Error(), "notAField") {
			t.Errorf("a Deployment with an unknown field was accepted (err %v): strict validation is not on", err)
		}
	}
}

// readmeInstall runs the install command of the README through bash, with bin/kustomize and the kubectl of
// KUBEBUILDER_ASSETS first on PATH and KUBECONFIG naming a cluster-admin of env.
func readmeInstall(t *testing.T, env *envtest.Environment) {
	t.Helper()
	kcPath, err := testenv.AdminKubeconfig(env, "kustomize-user", filepath.Join(t.TempDir(), "kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	const command = "kustomize build config/default | kubectl apply --server-side -f -"
	out, err := testenv.Shell(command, kcPath, filepath.Join(repo.Root(), "bin")).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", command, err, out)
	}
	t.Logf("%s:\n%s", command, out)
}

// appliedBy reports whether manager owns fields of o through server-side apply.
func appliedBy(o *unstructured.Unstructured, manager string) bool {
	for _, mf := range o.GetManagedFields() {
		if mf.Manager == manager && mf.Operation == metav1.ManagedFieldsOperationApply {
			return true
		}
	}
	return false
}

// TestKustomizePrometheusSelectsTheManagerAndProxyServers: config/prometheus's metrics Service selects the pods of
// config/default's manager and names a port its container serves; the PodMonitor selects the proxy-servers' label.
func TestKustomizePrometheusSelectsTheManagerAndProxyServers(t *testing.T) {
	objs := build(t, "prometheus")
	manager := build(t, "default")
	kinds := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		if o.GetNamespace() != "open-cluster-management-addon" {
			t.Errorf("%s %s is in namespace %q", o.GetKind(), o.GetName(), o.GetNamespace())
		}
		kinds[o.GetKind()] = o
	}
	for _, kind := range []string{"Service", "ServiceMonitor", "PodMonitor", "PrometheusRule"} {
		if kinds[kind] == nil {
			t.Fatalf("config/prometheus has no %s", kind)
		}
	}
	var podLabels map[string]string
	var ports []any
	for _, o := range manager {
		if o.GetKind() == "Deployment" && o.GetName() == "cluster-proxy-addon-manager" {
			podLabels, _, _ = unstructured.NestedStringMap(o.Object, "spec", "template", "metadata", "labels")
			containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
			ports, _, _ = unstructured.NestedSlice(containers[0].(map[string]any), "ports")
		}
	}
	selector, _, _ := unstructured.NestedStringMap(kinds["Service"].Object, "spec", "selector")
	if len(selector) == 0 {
		t.Fatal("the metrics Service selects nothing")
	}
	for k, v := range selector {
		if podLabels[k] != v {
			t.Errorf("the metrics Service selects %s=%s, which the manager's pods (%v) lack", k, v, podLabels)
		}
	}
	served := false
	for _, p := range ports {
		served = served || p.(map[string]any)["name"] == "metrics"
	}
	if !served {
		t.Errorf("the manager's container serves no port named metrics: %v", ports)
	}
	podMonitor, _, _ := unstructured.NestedStringMap(kinds["PodMonitor"].Object, "spec", "selector", "matchLabels")
	if podMonitor["proxy.open-cluster-management.io/component-name"] != "proxy-server" {
		t.Errorf("the PodMonitor selects %v, not the proxy-servers", podMonitor)
	}
}
