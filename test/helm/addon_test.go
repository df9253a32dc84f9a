package helm

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
)

// operatorImage is the chart's default image.
const operatorImage = "quay.io/cluster-proxy-operator/cluster-proxy-operator:v0.1.0"

// TestTheExistingAddonsValues renders the chart with a values file of the existing add-on's chart, then with each of
// its values set to another value: each means what it meant there, or the render fails with a message that names
// what replaces it.
func TestTheExistingAddonsValues(t *testing.T) {
	addon := valuesFile("addon-v0.11")
	render := func(t *testing.T, set ...string) ([]*unstructured.Unstructured, string, error) {
		t.Helper()
		args := []string{"-f", addon}
		for _, s := range set {
			args = append(args, "--set", s)
		}
		out, errOut, err := template(t, args...)
		if err != nil {
			return nil, errOut, err
		}
		return decode(t, out), errOut, nil
	}
	mpcField := func(g Gomega, objs []*unstructured.Unstructured, path ...string) any {
		mpc := find(objs, "ManagedProxyConfiguration", "", proxyv1alpha1.DefaultConfigurationName)
		g.Expect(mpc).NotTo(BeNil())
		v, _, err := unstructured.NestedFieldNoCopy(mpc.Object, append([]string{"spec"}, path...)...)
		g.Expect(err).NotTo(HaveOccurred())
		return v
	}
	managerImage := func(g Gomega, objs []*unstructured.Unstructured) string {
		d := find(objs, "Deployment", namespace, "cluster-proxy-addon-manager")
		g.Expect(d).NotTo(BeNil())
		containers, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
		return containers[0].(map[string]any)["image"].(string)
	}

	t.Run("as its chart ships them", func(t *testing.T) {
		g := NewWithT(t)
		objs, errOut, err := render(t)
		g.Expect(err).NotTo(HaveOccurred(), errOut)
		g.Expect(errOut).NotTo(ContainSubstring("warning"), "a string image over the chart's image map is the add-on's value, not a mistake")
		g.Expect(managerImage(g, objs)).To(Equal(operatorImage), "the add-on's image values name its own image: ignored at their defaults")
		g.Expect(mpcField(g, objs, "proxyServer", "image")).To(Equal(operatorImage))
		g.Expect(mpcField(g, objs, "proxyAgent", "image")).To(Equal(operatorImage))
		g.Expect(mpcField(g, objs, "userServer")).To(BeNil())
		g.Expect(find(objs, "AddOnDeploymentConfig", namespace, "cluster-proxy")).To(BeNil(), "the default agent namespace needs no configuration")
	})

	mapped := []struct {
		set   string
		check func(g Gomega, objs []*unstructured.Unstructured)
	}{
		{"registry=registry.corp.example/ocm/", func(g Gomega, objs []*unstructured.Unstructured) {
			mirrored := "registry.corp.example/ocm/cluster-proxy-operator:v0.1.0"
			g.Expect(managerImage(g, objs)).To(Equal(mirrored), "every image from the add-on's registry")
			g.Expect(mpcField(g, objs, "proxyServer", "image")).To(Equal(mirrored))
			g.Expect(mpcField(g, objs, "proxyAgent", "image")).To(Equal(mirrored))
		}},
		{"replicas=3", func(g Gomega, objs []*unstructured.Unstructured) {
			g.Expect(mpcField(g, objs, "proxyServer", "replicas")).To(BeEquivalentTo(3))
		}},
		{"spokeAddonNamespace=cluster-proxy-agents", func(g Gomega, objs []*unstructured.Unstructured) {
			adc := find(objs, "AddOnDeploymentConfig", namespace, "cluster-proxy")
			g.Expect(adc).NotTo(BeNil())
			ns, _, _ := unstructured.NestedString(adc.Object, "spec", "agentInstallNamespace")
			g.Expect(ns).To(Equal("cluster-proxy-agents"))
			cma := find(objs, "ClusterManagementAddOn", "", proxyv1alpha1.AddonName)
			configs, _, _ := unstructured.NestedSlice(cma.Object, "spec", "supportedConfigs")
			g.Expect(configs).To(ContainElement(HaveKeyWithValue("defaultConfig", map[string]any{"name": "cluster-proxy", "namespace": namespace})),
				"the default configuration of every cluster's add-on")
		}},
		{"proxyServer.entrypointLoadBalancer=true", func(g Gomega, objs []*unstructured.Unstructured) {
			g.Expect(mpcField(g, objs, "proxyServer", "entrypoint", "type")).To(Equal("LoadBalancerService"))
		}},
		{"proxyServer.entrypointAddress=proxy.hub.example", func(g Gomega, objs []*unstructured.Unstructured) {
			g.Expect(mpcField(g, objs, "proxyServer", "entrypoint", "type")).To(Equal("Hostname"))
			g.Expect(mpcField(g, objs, "proxyServer", "entrypoint", "hostname", "value")).To(Equal("proxy.hub.example"))
		}},
		{"proxyServer.port=8443", func(g Gomega, objs []*unstructured.Unstructured) {
			g.Expect(mpcField(g, objs, "proxyServer", "entrypoint", "port")).To(BeEquivalentTo(8443))
		}},
		{"installByPlacement.placementName=hubs", func(g Gomega, objs []*unstructured.Unstructured) {
			cma := find(objs, "ClusterManagementAddOn", "", proxyv1alpha1.AddonName)
			placements, _, _ := unstructured.NestedSlice(cma.Object, "spec", "installStrategy", "placements")
			g.Expect(placements).To(ConsistOf(map[string]any{"name": "hubs", "namespace": namespace}))
		}},
		{"enableServiceProxy=true", func(g Gomega, objs []*unstructured.Unstructured) {
			g.Expect(mpcField(g, objs, "userServer")).NotTo(BeNil(), "the add-on's switch of its user-server")
		}},
		{"featureGates.clusterProfile=true", func(g Gomega, objs []*unstructured.Unstructured) {
			defaults, errOut, err := render(t)
			g.Expect(err).NotTo(HaveOccurred(), errOut)
			g.Expect(objs).To(Equal(defaults), "taken either way: the manager publishes ClusterProfiles whenever their API is served")
		}},
		{"userServer.enabled=true", func(g Gomega, objs []*unstructured.Unstructured) {
			g.Expect(mpcField(g, objs, "userServer")).NotTo(BeNil())
		}},
		{"networkPolicies.enabled=true", func(g Gomega, objs []*unstructured.Unstructured) {
			g.Expect(mpcField(g, objs, "networkPolicies", "enabled")).To(BeTrue())
		}},
	}
	for _, m := range mapped {
		t.Run(m.set, func(t *testing.T) {
			g := NewWithT(t)
			objs, errOut, err := render(t, m.set)
			g.Expect(err).NotTo(HaveOccurred(), errOut)
			m.check(g, objs)
		})
	}

	refused := []struct{ set, names string }{
		{"image=cluster-proxy-custom", "image.repository"},
		{"tag=v0.11.0", "image.tag"},
		{"proxyServerImage=registry.corp.example/cluster-proxy", "proxyServer.image"},
		{"proxyAgentImage=registry.corp.example/cluster-proxy", "proxyAgent.image"},
		{"proxyServer.imagePullPolicy=Always", "proxyServer.image"},
		{"enableKubeApiProxy=false", "clusters/proxy"},
		{"enableImpersonation=false", "Remove the value"},
	}
	for _, r := range refused {
		t.Run(r.set, func(t *testing.T) {
			g := NewWithT(t)
			_, errOut, err := render(t, r.set)
			g.Expect(err).To(HaveOccurred())
			value := strings.SplitN(r.set, "=", 2)[0]
			g.Expect(errOut).To(ContainSubstring(value+"="), "the message names the add-on's value")
			g.Expect(errOut).To(ContainSubstring(r.names), "and what replaces it")
		})
	}
}
