package launcher

import (
	"encoding/json"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/render"
)

func TestAgentSelectionPicksTheRenderedAgentDeployment(t *testing.T) {
	g := NewWithT(t)
	mpc := &proxyv1alpha1.ManagedProxyConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "cluster-proxy"}}
	work, _, err := render.AgentWork(render.AgentInput{Cluster: "cluster1", MPC: mpc, EntrypointHost: "proxy.example.com"})
	g.Expect(err).NotTo(HaveOccurred())
	var rendered *appsv1.Deployment
	for _, m := range work.Spec.Workload.Manifests {
		d := &appsv1.Deployment{}
		g.Expect(json.Unmarshal(m.Raw, d)).To(Succeed())
		if d.Kind == "Deployment" && d.Name == render.AgentDeploymentName {
			rendered = d
		}
	}
	g.Expect(rendered).NotTo(BeNil(), "the ManifestWork holds the agent Deployment")

	sel := agentSelection()
	g.Expect(sel.labels.Matches(labels.Set(rendered.Labels))).To(BeTrue(), "the informer lists it")
	g.Expect(sel.match(rendered)).To(BeTrue())
	g.Expect(sel.labels.Matches(labels.Set{})).To(BeFalse(), "an unlabelled Deployment is not listed")
}
