package helm

import (
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestManagerPodDisruptionBudgetOnlyWithSeveralReplicas: with manager.replicas above 1 a drain may take one manager
// pod at a time (the budget selects exactly the Deployment's pods); with one there is no budget to wait on.
func TestManagerPodDisruptionBudgetOnlyWithSeveralReplicas(t *testing.T) {
	for _, tc := range []struct {
		replicas string
		budget   bool
	}{{"1", false}, {"2", true}, {"3", true}} {
		t.Run("replicas="+tc.replicas, func(t *testing.T) {
			g := NewWithT(t)
			out, errOut, err := template(t, "--set", "manager.replicas="+tc.replicas)
			g.Expect(err).NotTo(HaveOccurred(), errOut)
			objs := decode(t, out)
			pdb := find(objs, "PodDisruptionBudget", namespace, "cluster-proxy-addon-manager")
			if !tc.budget {
				g.Expect(pdb).To(BeNil())
				return
			}
			g.Expect(pdb).NotTo(BeNil())
			g.Expect(pdb.GetAPIVersion()).To(Equal("policy/v1"))
			maxUnavailable, _, _ := unstructured.NestedFieldNoCopy(pdb.Object, "spec", "maxUnavailable")
			g.Expect(maxUnavailable).To(Equal(int64(1)))
			_, hasMin, _ := unstructured.NestedFieldNoCopy(pdb.Object, "spec", "minAvailable")
			g.Expect(hasMin).To(BeFalse())
			manager := find(objs, "Deployment", namespace, "cluster-proxy-addon-manager")
			g.Expect(manager).NotTo(BeNil())
			selector, _, _ := unstructured.NestedMap(pdb.Object, "spec", "selector")
			want, _, _ := unstructured.NestedMap(manager.Object, "spec", "selector")
			g.Expect(selector).To(Equal(want))
		})
	}
}

// TestManagerPodsSpreadOverNodes: the manager's replicas prefer different nodes, and a one-node hub still runs them.
func TestManagerPodsSpreadOverNodes(t *testing.T) {
	g := NewWithT(t)
	out, errOut, err := template(t, "--set", "manager.replicas=2", "--set-string", "manager.nodeSelector.infra=true")
	g.Expect(err).NotTo(HaveOccurred(), errOut)
	manager := find(decode(t, out), "Deployment", namespace, "cluster-proxy-addon-manager")
	g.Expect(manager).NotTo(BeNil())
	constraints, _, _ := unstructured.NestedSlice(manager.Object, "spec", "template", "spec", "topologySpreadConstraints")
	podLabels, _, _ := unstructured.NestedMap(manager.Object, "spec", "selector", "matchLabels")
	g.Expect(constraints).To(Equal([]any{map[string]any{
		"maxSkew":           int64(1),
		"topologyKey":       "kubernetes.io/hostname",
		"whenUnsatisfiable": "ScheduleAnyway",
		"labelSelector":     map[string]any{"matchLabels": podLabels},
	}}))
	nodeSelector, _, _ := unstructured.NestedStringMap(manager.Object, "spec", "template", "spec", "nodeSelector")
	g.Expect(nodeSelector).To(Equal(map[string]string{"infra": "true"}), "the user's placement stays")
}

// TestResourcesValuesReachTheConfiguration: proxyServer.resources and proxyAgent.resources become the
// configuration's; left empty, the configuration has none and the operator's defaults apply.
func TestResourcesValuesReachTheConfiguration(t *testing.T) {
	g := NewWithT(t)
	out, errOut, err := template(t)
	g.Expect(err).NotTo(HaveOccurred(), errOut)
	mpc := find(decode(t, out), "ManagedProxyConfiguration", "", "cluster-proxy")
	g.Expect(mpc).NotTo(BeNil())
	for _, path := range [][]string{{"spec", "proxyServer", "resources"}, {"spec", "proxyAgent", "resources"}} {
		_, found, _ := unstructured.NestedFieldNoCopy(mpc.Object, path...)
		g.Expect(found).To(BeFalse(), "%v with the default values", path)
	}

	out, errOut, err = template(t,
		"--set", "proxyServer.resources.requests.cpu=200m", "--set", "proxyServer.resources.requests.memory=512Mi",
		"--set", "proxyServer.resources.limits.memory=1Gi",
		"--set", "proxyAgent.resources.requests.cpu=20m", "--set", "proxyAgent.resources.limits.memory=128Mi")
	g.Expect(err).NotTo(HaveOccurred(), errOut)
	mpc = find(decode(t, out), "ManagedProxyConfiguration", "", "cluster-proxy")
	g.Expect(mpc).NotTo(BeNil())
	server, _, _ := unstructured.NestedMap(mpc.Object, "spec", "proxyServer", "resources")
	g.Expect(server).To(Equal(map[string]any{
		"requests": map[string]any{"cpu": "200m", "memory": "512Mi"},
		"limits":   map[string]any{"memory": "1Gi"},
	}))
	agent, _, _ := unstructured.NestedMap(mpc.Object, "spec", "proxyAgent", "resources")
	g.Expect(agent).To(Equal(map[string]any{
		"requests": map[string]any{"cpu": "20m"},
		"limits":   map[string]any{"memory": "128Mi"},
	}))
}
