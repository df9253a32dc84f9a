package helm

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/testenv"
)

// monitoringKinds are the objects the monitoring values add; none may render without the prometheus-operator's API.
var monitoringKinds = []string{"ServiceMonitor", "PodMonitor", "PrometheusRule"}

func monitoringObjects(objs []*unstructured.Unstructured) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		switch {
		case o.GetAPIVersion() == "monitoring.coreos.com/v1",
			o.GetKind() == "Service" && o.GetName() == "cluster-proxy-addon-manager-metrics",
			o.GetKind() == "ConfigMap" && o.GetLabels()["grafana_dashboard"] != "":
			out = append(out, o)
		}
	}
	return out
}

// TestMonitoringRendersNothingWithoutThePrometheusOperatorsAPI: monitoring.enabled on a hub that does not serve
// monitoring.coreos.com/v1 installs as before, and the defaults render no monitoring object even where it is served.
func TestMonitoringRendersNothingWithoutThePrometheusOperatorsAPI(t *testing.T) {
	g := NewWithT(t)
	out, errOut, err := template(t, "--set", "monitoring.enabled=true")
	g.Expect(err).NotTo(HaveOccurred(), errOut)
	g.Expect(monitoringObjects(decode(t, out))).To(BeEmpty())

	out, errOut, err = template(t, "--api-versions", "monitoring.coreos.com/v1")
	g.Expect(err).NotTo(HaveOccurred(), errOut)
	g.Expect(monitoringObjects(decode(t, out))).To(BeEmpty(), "monitoring is off by default")
}

// TestMonitoringRendersScrapeObjectsAlertsAndDashboards: with the prometheus-operator's API, the manager's metrics
// Service and ServiceMonitor select the manager's pods and port, the PodMonitor the proxy-servers' health port, the
// PrometheusRule holds files/alerts.yaml, and every dashboard is a ConfigMap for Grafana's sidecar.
func TestMonitoringRendersScrapeObjectsAlertsAndDashboards(t *testing.T) {
	g := NewWithT(t)
	out, errOut, err := template(t, "--api-versions", "monitoring.coreos.com/v1", "--set", "monitoring.enabled=true",
		"--set", "monitoring.labels.release=kube-prometheus-stack")
	g.Expect(err).NotTo(HaveOccurred(), errOut)
	objs := decode(t, out)
	for _, kind := range monitoringKinds {
		var names []string
		for _, o := range objs {
			if o.GetKind() == kind {
				names = append(names, o.GetName())
				g.Expect(o.GetNamespace()).To(Equal(namespace))
				g.Expect(o.GetLabels()).To(HaveKeyWithValue("release", "kube-prometheus-stack"), kind)
			}
		}
		g.Expect(names).To(HaveLen(1), kind)
	}

	manager := find(objs, "Deployment", namespace, "cluster-proxy-addon-manager")
	g.Expect(manager).NotTo(BeNil())
	podLabels, _, _ := unstructured.NestedStringMap(manager.Object, "spec", "template", "metadata", "labels")
	containers, _, _ := unstructured.NestedSlice(manager.Object, "spec", "template", "spec", "containers")
	ports, _, _ := unstructured.NestedSlice(containers[0].(map[string]any), "ports")
	g.Expect(ports).To(ContainElement(HaveKeyWithValue("name", "metrics")))

	svc := find(objs, "Service", namespace, "cluster-proxy-addon-manager-metrics")
	g.Expect(svc).NotTo(BeNil())
	selector, _, _ := unstructured.NestedStringMap(svc.Object, "spec", "selector")
	expectSelects(g, selector, podLabels, "the metrics Service selects the manager's pods")
	svcPorts, _, _ := unstructured.NestedSlice(svc.Object, "spec", "ports")
	g.Expect(svcPorts).To(ConsistOf(And(HaveKeyWithValue("name", "metrics"), HaveKeyWithValue("targetPort", "metrics"))))

	sm := find(objs, "ServiceMonitor", namespace, "cluster-proxy-addon-manager")
	g.Expect(sm).NotTo(BeNil())
	smSelector, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
	expectSelects(g, smSelector, svc.GetLabels(), "the ServiceMonitor selects the metrics Service")
	endpoints, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	g.Expect(endpoints).To(ConsistOf(And(HaveKeyWithValue("port", "metrics"), HaveKeyWithValue("path", "/metrics"))))

	pm := find(objs, "PodMonitor", namespace, "cluster-proxy-proxy-server")
	g.Expect(pm).NotTo(BeNil())
	pmSelector, _, _ := unstructured.NestedStringMap(pm.Object, "spec", "selector", "matchLabels")
	g.Expect(pmSelector).To(Equal(map[string]string{"proxy.open-cluster-management.io/component-name": "proxy-server"}))
	pmEndpoints, _, _ := unstructured.NestedSlice(pm.Object, "spec", "podMetricsEndpoints")
	g.Expect(pmEndpoints).To(ConsistOf(And(HaveKeyWithValue("port", "health"), HaveKeyWithValue("path", "/metrics"))))

	rule := find(objs, "PrometheusRule", namespace, "cluster-proxy")
	g.Expect(rule).NotTo(BeNil())
	raw, err := os.ReadFile(filepath.Join(chartDir(), "files", "alerts.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	var alerts map[string]any
	g.Expect(yaml.Unmarshal(raw, &alerts)).To(Succeed())
	groups, _, _ := unstructured.NestedSlice(rule.Object, "spec", "groups")
	g.Expect(groups).To(Equal(alerts["groups"]), "the PrometheusRule holds the alerts as files/alerts.yaml writes them")

	dashboards, err := filepath.Glob(filepath.Join(chartDir(), "files", "dashboards", "*.json"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(dashboards).NotTo(BeEmpty())
	for _, path := range dashboards {
		name := filepath.Base(path)
		cm := find(objs, "ConfigMap", namespace, "cluster-proxy-dashboard-"+name[:len(name)-len(".json")])
		g.Expect(cm).NotTo(BeNil(), name)
		g.Expect(cm.GetLabels()).To(HaveKeyWithValue("grafana_dashboard", "1"))
		data, _, _ := unstructured.NestedString(cm.Object, "data", name)
		want, err := os.ReadFile(path)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(json.Valid([]byte(data))).To(BeTrue(), name)
		g.Expect(data).To(MatchJSON(want), name)
	}
}

// TestMonitoringInstallsOnAHubWithoutThePrometheusOperator: docs/monitoring.md's install, with the monitoring values,
// on a hub that does not serve monitoring.coreos.com/v1: helm asks the hub, renders no monitoring object, and the
// release installs as without them.
func TestMonitoringInstallsOnAHubWithoutThePrometheusOperator(t *testing.T) {
	g := NewWithT(t)
	env, c := startHub(t)
	kcPath, err := testenv.AdminKubeconfig(env, "helm-user", filepath.Join(t.TempDir(), "kubeconfig"))
	g.Expect(err).NotTo(HaveOccurred())
	out, errOut, err := runHelm(t, "upgrade", "--install", "-n", namespace, "--create-namespace", releaseName, chartDir(),
		"--set", "monitoring.enabled=true", "--set", "monitoring.labels.release=kube-prometheus-stack", "--kubeconfig", kcPath)
	g.Expect(err).NotTo(HaveOccurred(), "%s%s", out, errOut)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "cluster-proxy-addon-manager"}, &appsv1.Deployment{})).To(Succeed())
	err = c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "cluster-proxy-addon-manager-metrics"}, &corev1.Service{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the metrics Service is rendered only with the ServiceMonitor: %v", err)
	dashboards := &corev1.ConfigMapList{}
	g.Expect(c.List(ctx, dashboards, client.InNamespace(namespace), client.HasLabels{"grafana_dashboard"})).To(Succeed())
	g.Expect(dashboards.Items).To(BeEmpty())
}

// expectSelects fails unless selector is not empty and labels hold every one of its pairs.
func expectSelects(g Gomega, selector, labels map[string]string, what string) {
	g.Expect(selector).NotTo(BeEmpty(), what)
	for k, v := range selector {
		g.Expect(labels).To(HaveKeyWithValue(k, v), what)
	}
}

// monitoringCRDs are the prometheus-operator's CRDs the chart's monitoring objects need, as make monitoring-crds writes
// them from the prometheus-operator's API module.
var monitoringCRDs = []string{"monitoring.coreos.com_servicemonitors.yaml", "monitoring.coreos.com_podmonitors.yaml",
	"monitoring.coreos.com_prometheusrules.yaml"}

// TestMonitoringInstallsOnAHubWithThePrometheusOperatorsCRDs: on a hub that serves monitoring.coreos.com/v1, helm
// install with the monitoring values creates the ServiceMonitor, PodMonitor and PrometheusRule, which the API server
// takes against the prometheus-operator's own schemas without dropping a field, the manager's metrics Service and the
// dashboards' ConfigMaps.
func TestMonitoringInstallsOnAHubWithThePrometheusOperatorsCRDs(t *testing.T) {
	g := NewWithT(t)
	env, c := startHub(t)
	var paths []string
	for _, name := range monitoringCRDs {
		path := filepath.Join(root(), "bin", "monitoring-crds", name)
		_, err := os.Stat(path)
		g.Expect(err).NotTo(HaveOccurred(), "run 'make monitoring-crds' (make test does)")
		paths = append(paths, path)
	}
	_, err := envtest.InstallCRDs(env.Config, envtest.CRDInstallOptions{Paths: paths})
	g.Expect(err).NotTo(HaveOccurred())
	kcPath, err := testenv.AdminKubeconfig(env, "helm-user", filepath.Join(t.TempDir(), "kubeconfig"))
	g.Expect(err).NotTo(HaveOccurred())
	out, errOut, err := runHelm(t, "install", "-n", namespace, "--create-namespace", releaseName, chartDir(),
		"--set", "monitoring.enabled=true", "--kubeconfig", kcPath)
	g.Expect(err).NotTo(HaveOccurred(), "%s%s", out, errOut)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rendered, errOut, err := template(t, "--api-versions", "monitoring.coreos.com/v1", "--set", "monitoring.enabled=true")
	g.Expect(err).NotTo(HaveOccurred(), errOut)
	wanted := monitoringObjects(decode(t, rendered))
	var kinds []string
	for _, o := range wanted {
		kinds = append(kinds, o.GetKind())
	}
	g.Expect(kinds).To(ContainElements(append(monitoringKinds, "Service", "ConfigMap")), "what the install must have created")
	for _, want := range wanted {
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(want.GroupVersionKind())
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(want), live)).To(Succeed(), "%s %s", want.GetKind(), want.GetName())
		if want.GetAPIVersion() == "monitoring.coreos.com/v1" {
			g.Expect(live.Object["spec"]).To(Equal(want.Object["spec"]), "%s %s as rendered, no field pruned", want.GetKind(), want.GetName())
		}
	}
}
