package controllers_test

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	addonv1beta1 "open-cluster-management.io/api/addon/v1beta1"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	clusterv1beta1 "open-cluster-management.io/api/cluster/v1beta1"
	workv1 "open-cluster-management.io/api/work/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/controllers/managedproxyconfiguration"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/certs"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/apply"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/certtest"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/testenv"
)

const agentWork = "addon-cluster-proxy-deploy-0"

// newCluster registers an accepted managed cluster with its namespace, as OCM's registration does.
func newCluster(name string) {
	Expect(k8s.Create(ctx(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})).To(Succeed())
	Expect(k8s.Create(ctx(), &clusterv1.ManagedCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       clusterv1.ManagedClusterSpec{HubAcceptsClient: true},
	})).To(Succeed())
}

func installAddOn(cluster string, configs ...addonv1alpha1.AddOnConfig) {
	Expect(k8s.Create(ctx(), &addonv1alpha1.ManagedClusterAddOn{
		ObjectMeta: metav1.ObjectMeta{Name: "cluster-proxy", Namespace: cluster},
		Spec:       addonv1alpha1.ManagedClusterAddOnSpec{Configs: configs},
	})).To(Succeed())
}

// agentManifests decodes the agent ManifestWork's manifests by kind/name.
func agentManifests(g Gomega, cluster string) (*workv1.ManifestWork, map[string]*unstructured.Unstructured) {
	work := get(g, &workv1.ManifestWork{}, cluster, agentWork)
	out := map[string]*unstructured.Unstructured{}
	for _, m := range work.Spec.Workload.Manifests {
		u := &unstructured.Unstructured{}
		g.ExpectWithOffset(1, json.Unmarshal(m.Raw, &u.Object)).To(Succeed())
		out[u.GetKind()+"/"+u.GetName()] = u
	}
	return work, out
}

func agentDeployment(g Gomega, cluster string) *appsv1.Deployment {
	_, m := agentManifests(g, cluster)
	u, ok := m["Deployment/cluster-proxy-proxy-agent"]
	g.ExpectWithOffset(1, ok).To(BeTrue(), "the work holds the agent Deployment")
	d := &appsv1.Deployment{}
	g.ExpectWithOffset(1, runtimeDefaultConvert(u, d)).To(Succeed())
	return d
}

// proxyURLs are the proxy variables of container c as the agent gets them: from the credentials Secret of the agent
// work its secretKeyRefs name, or from the values.
func proxyURLs(g Gomega, cluster string, c corev1.Container) map[string]string {
	_, m := agentManifests(g, cluster)
	out := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
			out[e.Name] = e.Value
			continue
		}
		u, ok := m["Secret/"+e.ValueFrom.SecretKeyRef.Name]
		g.ExpectWithOffset(1, ok).To(BeTrue(), "the work holds Secret %s", e.ValueFrom.SecretKeyRef.Name)
		s := &corev1.Secret{}
		g.ExpectWithOffset(1, runtimeDefaultConvert(u, s)).To(Succeed())
		out[e.Name] = string(s.Data[e.ValueFrom.SecretKeyRef.Key])
	}
	return out
}

func runtimeDefaultConvert(u *unstructured.Unstructured, into any) error {
	raw, err := json.Marshal(u.Object)
	if err != nil {
		return err
	}
	return json.Unmarshal(raw, into)
}

func addOnCondition(g Gomega, cluster, conditionType string) *metav1.Condition {
	mca := get(g, &addonv1alpha1.ManagedClusterAddOn{}, cluster, "cluster-proxy")
	c := meta.FindStatusCondition(mca.Status.Conditions, conditionType)
	g.ExpectWithOffset(1, c).NotTo(BeNil(), "add-on condition %s", conditionType)
	return c
}

func statusCondition(g Gomega, cluster, conditionType string) *metav1.Condition {
	cps := get(g, &proxyv1alpha1.ClusterProxyStatus{}, cluster, "cluster-proxy")
	c := meta.FindStatusCondition(cps.Status.Conditions, conditionType)
	g.ExpectWithOffset(1, c).NotTo(BeNil(), "ClusterProxyStatus condition %s", conditionType)
	return c
}

// reportWorkApplied plays OCM's work agent: the work is applied and available, with replica feedback.
func reportWorkApplied(cluster string) {
	Eventually(func(g Gomega) {
		work := get(g, &workv1.ManifestWork{}, cluster, agentWork)
		now := metav1.Now()
		work.Status.Conditions = []metav1.Condition{
			{Type: workv1.WorkApplied, Status: metav1.ConditionTrue, Reason: "AppliedManifestWorkComplete", ObservedGeneration: work.Generation, LastTransitionTime: now},
			{Type: workv1.WorkAvailable, Status: metav1.ConditionTrue, Reason: "ResourcesAvailable", ObservedGeneration: work.Generation, LastTransitionTime: now},
		}
		work.Status.ResourceStatus.Manifests = []workv1.ManifestCondition{{
			ResourceMeta: workv1.ManifestResourceMeta{Group: "apps", Version: "v1", Kind: "Deployment", Resource: "deployments",
				Name: "cluster-proxy-proxy-agent", Namespace: "open-cluster-management-cluster-proxy"},
			StatusFeedbacks: workv1.StatusFeedbackResult{Values: []workv1.FeedbackValue{
				{Name: "Replicas", Value: workv1.FieldValue{Type: workv1.Integer, Integer: ptr.To[int64](2)}},
				{Name: "AvailableReplicas", Value: workv1.FieldValue{Type: workv1.Integer, Integer: ptr.To[int64](2)}},
			}},
			Conditions: []metav1.Condition{},
		}}
		g.Expect(k8s.Status().Update(ctx(), work)).To(Succeed())
	}, timeout, interval).Should(Succeed())
}

// clusterClient is a client authenticated as the hub identity of a cluster's klusterlet, so CSRs carry the
// requestor OCM's agent would.
func clusterClient(cluster string) client.Client {
	user, err := env.AddUser(envtest.User{
		Name:   "system:open-cluster-management:" + cluster + ":agent1",
		Groups: []string{"system:open-cluster-management:" + cluster, "system:open-cluster-management:managed-clusters", "system:masters"},
	}, nil)
	Expect(err).NotTo(HaveOccurred())
	c, err := client.New(user.Config(), client.Options{Scheme: k8s.Scheme()})
	Expect(err).NotTo(HaveOccurred())
	return c
}

func newCSR(cluster, name, signer, cn string, orgs, ous []string) *certificatesv1.CertificateSigningRequest {
	request, err := certtest.RequestPEM(pkix.Name{CommonName: cn, Organization: orgs, OrganizationalUnit: ous})
	Expect(err).NotTo(HaveOccurred())
	return &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			"open-cluster-management.io/cluster-name": cluster, "open-cluster-management.io/addon-name": "cluster-proxy"}},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    request,
			SignerName: signer,
			Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageKeyEncipherment, certificatesv1.UsageClientAuth},
		},
	}
}

func csrState(g Gomega, name string) (*certificatesv1.CertificateSigningRequest, certificatesv1.RequestConditionType) {
	csr := get(g, &certificatesv1.CertificateSigningRequest{}, "", name)
	for _, c := range csr.Status.Conditions {
		if c.Status == corev1.ConditionTrue {
			return csr, c.Type
		}
	}
	return csr, ""
}

var _ = Describe("Cluster agents", Ordered, func() {
	var hub *proxyv1alpha1.ManagedProxyConfiguration
	var bundle []byte

	BeforeAll(func() {
		hub = newMPC(func(m *proxyv1alpha1.ManagedProxyConfiguration) {
			m.Name = proxyv1alpha1.DefaultConfigurationName
			m.Spec.ProxyAgent.Replicas = 2
			m.Spec.ProxyAgent.ImagePullSecrets = []string{"pull-secret"}
			m.Spec.ProxyAgent.Image = "quay.io/ocm/cluster-proxy:v1"
		})
		Expect(k8s.Create(ctx(), hub)).To(Succeed())
		DeferCleanup(func() {
			_ = k8s.Delete(ctx(), hub)
			// The garbage collector removes the ClusterManagementAddOn the default configuration owns, and then every
			// add-on the ClusterManagementAddOn owns. Until it has, a later spec's new add-on can be made an owner of
			// the doomed ClusterManagementAddOn and go with it.
			expectGone(&addonv1alpha1.ClusterManagementAddOn{ObjectMeta: metav1.ObjectMeta{Name: proxyv1alpha1.AddonName}})
		})
		expectReady(hub)
		bundle = get(Default, &corev1.Secret{}, hub.Spec.ProxyServer.Namespace, "proxy-server-ca").Data["ca.crt"]
	})

	It("lists and watches ManagedClusters as metadata only, never as whole clusters", func() {
		cluster := "meta-" + mpcSuffix()
		newCluster(cluster)
		installAddOn(cluster)
		Eventually(func(g Gomega) {
			g.Expect(get(g, &proxyv1alpha1.ClusterProxyStatus{}, cluster, "cluster-proxy").Status.Conditions).NotTo(BeEmpty())
		}, timeout, interval).Should(Succeed())
		reads := requests.CollectionReadsOf("managedclusters")
		Expect(reads.Metadata).To(BeNumerically(">=", 1), "the clusters' metadata are listed and watched")
		Expect(reads.Whole).To(BeZero(), "the spec and the status the klusterlet keeps rewriting are not cached")
	})

	It("speaks the add-on API at the version the hub serves, and add-ons and configs written as v1beta1 work", func() {
		cluster := "v1beta1-" + mpcSuffix()
		newCluster(cluster)
		served, unused := "addon.open-cluster-management.io/v1beta1", "addon.open-cluster-management.io/v1alpha1"
		if ocmHub.Release == testenv.OCM10 {
			served, unused = unused, served
			installAddOn(cluster, addonv1alpha1.AddOnConfig{
				ConfigGroupResource: addonv1alpha1.ConfigGroupResource{Group: addonv1alpha1.GroupName, Resource: "addondeploymentconfigs"},
				ConfigReferent:      addonv1alpha1.ConfigReferent{Namespace: cluster, Name: "proxy"}})
			Expect(k8s.Create(ctx(), &addonv1alpha1.AddOnDeploymentConfig{ObjectMeta: metav1.ObjectMeta{Name: "proxy", Namespace: cluster},
				Spec: addonv1alpha1.AddOnDeploymentConfigSpec{ProxyConfig: addonv1alpha1.ProxyConfig{HTTPSProxy: "https://squid.example:3129"}}})).To(Succeed())
		} else {
			By("a user of OCM v1.2 writes the add-on and its config as v1beta1")
			Expect(k8s.Create(ctx(), &addonv1beta1.ManagedClusterAddOn{ObjectMeta: metav1.ObjectMeta{Name: "cluster-proxy", Namespace: cluster},
				Spec: addonv1beta1.ManagedClusterAddOnSpec{Configs: []addonv1beta1.AddOnConfig{{
					ConfigGroupResource: addonv1beta1.ConfigGroupResource{Group: addonv1beta1.GroupName, Resource: "addondeploymentconfigs"},
					ConfigReferent:      addonv1beta1.ConfigReferent{Namespace: cluster, Name: "proxy"}}}}})).To(Succeed())
			Expect(k8s.Create(ctx(), &addonv1beta1.AddOnDeploymentConfig{ObjectMeta: metav1.ObjectMeta{Name: "proxy", Namespace: cluster},
				Spec: addonv1beta1.AddOnDeploymentConfigSpec{ProxyConfig: addonv1beta1.ProxyConfig{HTTPSProxy: "https://squid.example:3129"}}})).To(Succeed())
		}
		Eventually(func(g Gomega) {
			g.Expect(envValue(agentDeployment(g, cluster).Spec.Template.Spec.Containers[0].Env, "HTTPS_PROXY")).To(Equal("https://squid.example:3129"))
			g.Expect(get(g, &addonv1alpha1.ManagedClusterAddOn{}, cluster, "cluster-proxy").Status.Registrations).NotTo(BeEmpty())
		}, timeout, interval).Should(Succeed())
		if ocmHub.Release == testenv.OCM12 {
			By("a v1beta1 client reads the status the manager wrote, converted by OCM's webhook")
			// The status is written after the work, and again when another writer changed the add-on meanwhile.
			Eventually(func(g Gomega) {
				mca := get(g, &addonv1beta1.ManagedClusterAddOn{}, cluster, "cluster-proxy")
				g.Expect(mca.Status.Namespace).To(Equal("open-cluster-management-agent-addon"), "an AddOnDeploymentConfig's default install namespace")
				g.Expect(mca.Status.Registrations).To(ContainElement(SatisfyAll(HaveField("Type", addonv1beta1.CustomSigner),
					HaveField("CustomSigner.SignerName", "open-cluster-management.io/proxy-agent-signer"))))
				g.Expect(mca.Status.ConfigReferences).To(ContainElement(HaveField("DesiredConfig.ConfigReferent",
					addonv1beta1.ConfigReferent{Namespace: cluster, Name: "proxy"})))
			}, timeout, interval).Should(Succeed())
		}
		Expect(requests.To(served)).To(BeNumerically(">", 0), "the manager's requests to %s", served)
		Expect(requests.To(unused)).To(BeZero(), "the manager's requests to %s (the last: %s)", unused, requests.LastTo(unused))
	})

	It("installs the agent through a ManifestWork and serves the add-on status, the OCM way", func() {
		cluster := "c-" + mpcSuffix()
		newCluster(cluster)
		installAddOn(cluster)
		host := hub.Spec.ProxyServer.Entrypoint.Hostname.Value

		Eventually(func(g Gomega) {
			work, m := agentManifests(g, cluster)
			g.Expect(metav1.GetControllerOf(work)).To(HaveField("Kind", "ManagedClusterAddOn"))
			g.Expect(m).To(HaveKey("Namespace/open-cluster-management-cluster-proxy"))
			g.Expect(m).To(HaveKey("ServiceAccount/cluster-proxy"))
			g.Expect(m).To(HaveKey("Role/cluster-proxy-addon-agent"))
			g.Expect(m).To(HaveKey("RoleBinding/cluster-proxy-addon-agent"))
			g.Expect(m).NotTo(HaveKey(HavePrefix("ClusterRole/")), "no impersonation without the service-proxy")
			caSecret := &corev1.Secret{}
			g.Expect(runtimeDefaultConvert(m["Secret/cluster-proxy-ca"], caSecret)).To(Succeed())
			g.Expect(caSecret.Data["ca.crt"]).To(Equal(bundle))
		}, timeout, interval).Should(Succeed())

		d := agentDeployment(Default, cluster)
		Expect(*d.Spec.Replicas).To(Equal(int32(2)))
		c := d.Spec.Template.Spec.Containers[0]
		Expect(c.Image).To(Equal("quay.io/ocm/cluster-proxy:v1"))
		Expect(c.Args).To(ContainElements("--proxy-server-host="+host, "--proxy-server-port=8091",
			"--agent-identifiers=host="+cluster+"&host="+cluster+".open-cluster-management-cluster-proxy"))
		Expect(c.Env).To(BeEmpty(), "no forward proxy configured")
		Expect(d.Spec.Template.Spec.ImagePullSecrets).To(ConsistOf(corev1.LocalObjectReference{Name: "pull-secret"}))
		Expect(*d.Spec.Template.Spec.SecurityContext.RunAsNonRoot).To(BeTrue())

		By("the add-on status asks the klusterlet for the hub kubeconfig and the agent certificate")
		var caFingerprint string
		Eventually(func(g Gomega) {
			caFingerprint = get(g, &proxyv1alpha1.ManagedProxyConfiguration{}, "", hub.Name).Status.Signer.CAFingerprint
			mca := get(g, &addonv1alpha1.ManagedClusterAddOn{}, cluster, "cluster-proxy")
			g.Expect(mca.Status.Namespace).To(Equal("open-cluster-management-cluster-proxy"))
			g.Expect(mca.Status.Registrations).To(ConsistOf(
				And(HaveField("SignerName", "kubernetes.io/kube-apiserver-client"),
					HaveField("Subject.Groups", ConsistOf("system:open-cluster-management:cluster:"+cluster+":addon:cluster-proxy",
						"system:open-cluster-management:addon:cluster-proxy"))),
				And(HaveField("SignerName", "open-cluster-management.io/proxy-agent-signer"),
					HaveField("Subject.User", "open-cluster-management:cluster-proxy:agent:"+cluster),
					HaveField("Subject.OrganizationUnits", ConsistOf(HavePrefix("signer-"+strings.TrimPrefix(caFingerprint, "SHA256:")[:16]),
						"agent-namespace:open-cluster-management-cluster-proxy"))),
			))
			g.Expect(mca.Status.ConfigReferences).To(ContainElement(And(
				HaveField("ConfigGroupResource.Resource", "managedproxyconfigurations"), HaveField("DesiredConfig.Name", "cluster-proxy"))))
			g.Expect(addOnCondition(g, cluster, "Configured").Status).To(Equal(metav1.ConditionTrue))
			g.Expect(addOnCondition(g, cluster, "ManifestApplied").Reason).To(Equal("WorkNotApplied"))
			g.Expect(addOnCondition(g, cluster, "Progressing").Status).To(Equal(metav1.ConditionTrue))

			cps := get(g, &proxyv1alpha1.ClusterProxyStatus{}, cluster, "cluster-proxy")
			g.Expect(cps.Spec.ClusterName).To(Equal(cluster))
			g.Expect(cps.Status.AgentImage).To(Equal("quay.io/ocm/cluster-proxy:v1"))
			g.Expect(statusCondition(g, cluster, "AgentDeployed").Reason).To(Equal("WorkNotApplied"))
			g.Expect(statusCondition(g, cluster, "ProxySettingsApplied").Reason).To(Equal("DirectConnection"))
			g.Expect(statusCondition(g, cluster, "CertificateReady").Reason).To(Equal("WaitingForCertificate"))
			g.Expect(statusCondition(g, cluster, "AgentConnected").Status).To(Equal(metav1.ConditionUnknown))
		}, timeout, interval).Should(Succeed())

		By("once the work agent applied the work, the add-on and the status say so")
		reportWorkApplied(cluster)
		Eventually(func(g Gomega) {
			g.Expect(addOnCondition(g, cluster, "ManifestApplied").Status).To(Equal(metav1.ConditionTrue))
			g.Expect(addOnCondition(g, cluster, "Progressing").Reason).To(Equal("Completed"))
			cps := get(g, &proxyv1alpha1.ClusterProxyStatus{}, cluster, "cluster-proxy")
			g.Expect(cps.Status.Installed).To(BeTrue())
			ad := statusCondition(g, cluster, "AgentDeployed")
			g.Expect(ad.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(ad.Message).To(ContainSubstring("2 of 2"))
		}, timeout, interval).Should(Succeed())

		By("the operator owns the status whole: one managed-fields entry, not one per field of every condition")
		cps := get(Default, &proxyv1alpha1.ClusterProxyStatus{}, cluster, "cluster-proxy")
		var statusEntries []metav1.ManagedFieldsEntry
		for _, e := range cps.ManagedFields {
			if e.Subresource == "status" {
				statusEntries = append(statusEntries, e)
			}
		}
		Expect(statusEntries).To(ConsistOf(And(HaveField("Manager", apply.FieldOwner), HaveField("Operation", metav1.ManagedFieldsOperationUpdate))))
		Expect(statusEntries[0].FieldsV1.GetRawString()).To(Equal(`{"f:status":{}}`))

		By("the agent keeps its Lease on the managed cluster: no per-cluster RBAC is written on the hub")
		bindings := &rbacv1.RoleBindingList{}
		Expect(k8s.List(ctx(), bindings, client.InNamespace(cluster))).To(Succeed())
		Expect(bindings.Items).To(BeEmpty())
	})

	It("works for a cluster whose name starts with a digit", func() {
		cluster := "1st-" + mpcSuffix()
		newCluster(cluster)
		installAddOn(cluster)
		Eventually(func(g Gomega) {
			_, m := agentManifests(g, cluster)
			for key := range m {
				g.Expect(key).NotTo(ContainSubstring(cluster), "no object is named after the cluster")
			}
			d := agentDeployment(g, cluster)
			g.Expect(d.Spec.Template.Spec.Containers[0].Args).To(ContainElement("--agent-identifiers=host=" + cluster + "&host=" + cluster + ".open-cluster-management-cluster-proxy"))
			g.Expect(statusCondition(g, cluster, "ProxySettingsApplied").Status).To(Equal(metav1.ConditionTrue))
		}, timeout, interval).Should(Succeed())
	})

	It("keeps the add-on status fields and conditions OCM's own controllers write", func() {
		cluster := "keep-" + mpcSuffix()
		newCluster(cluster)
		installAddOn(cluster)
		Eventually(func(g Gomega) {
			g.Expect(addOnCondition(g, cluster, "ManifestApplied").Reason).To(Equal("WorkNotApplied"))
		}, timeout, interval).Should(Succeed())

		By("OCM's addon-manager and registration agent write their part of the status")
		mca := &addonv1alpha1.ManagedClusterAddOn{ObjectMeta: metav1.ObjectMeta{Namespace: cluster, Name: "cluster-proxy"}}
		ocm := []byte(`{"status":{` +
			`"supportedConfigs":[{"group":"addon.open-cluster-management.io","resource":"addondeploymentconfigs"}],` +
			`"relatedObjects":[{"group":"addon.open-cluster-management.io","resource":"clustermanagementaddons","name":"cluster-proxy"}],` +
			`"addOnMeta":{"displayName":"cluster-proxy"}}}`)
		Expect(k8s.Status().Patch(ctx(), mca, client.RawPatch(types.MergePatchType, ocm), client.FieldOwner("addon-manager"))).To(Succeed())
		Eventually(func(g Gomega) {
			live := get(g, &addonv1alpha1.ManagedClusterAddOn{}, cluster, "cluster-proxy")
			meta.SetStatusCondition(&live.Status.Conditions, metav1.Condition{Type: "RegistrationApplied", Status: metav1.ConditionTrue,
				Reason: "SetPermissionApplied", Message: "Registration of the addon agent is configured"})
			g.Expect(k8s.Status().Update(ctx(), live, client.FieldOwner("registration-agent"))).To(Succeed())
		}, timeout, interval).Should(Succeed())

		By("the operator's next write, for the applied work, leaves them as they are")
		reportWorkApplied(cluster)
		Eventually(func(g Gomega) {
			g.Expect(addOnCondition(g, cluster, "ManifestApplied").Status).To(Equal(metav1.ConditionTrue))
			live := get(g, &addonv1alpha1.ManagedClusterAddOn{}, cluster, "cluster-proxy")
			g.Expect(live.Status.SupportedConfigs).To(ConsistOf(HaveField("Resource", "addondeploymentconfigs")))
			g.Expect(live.Status.RelatedObjects).To(ConsistOf(HaveField("Resource", "clustermanagementaddons")))
			g.Expect(live.Status.AddOnMeta.DisplayName).To(Equal("cluster-proxy"))
			g.Expect(addOnCondition(g, cluster, "RegistrationApplied").Reason).To(Equal("SetPermissionApplied"))
		}, timeout, interval).Should(Succeed())
	})

	It("keeps a user's default AddOnDeploymentConfig in the ClusterManagementAddOn and applies it on every cluster", func() {
		clusters := []string{"dflt-" + mpcSuffix(), "dflt-" + mpcSuffix()}
		for _, c := range clusters {
			newCluster(c)
			installAddOn(c)
		}
		adcNS := "defaults-" + mpcSuffix()
		Expect(k8s.Create(ctx(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: adcNS}})).To(Succeed())
		Expect(k8s.Create(ctx(), &addonv1alpha1.AddOnDeploymentConfig{
			ObjectMeta: metav1.ObjectMeta{Name: "fleet-proxy", Namespace: adcNS},
			Spec:       addonv1alpha1.AddOnDeploymentConfigSpec{ProxyConfig: addonv1alpha1.ProxyConfig{HTTPSProxy: "https://fleet-proxy.corp.example:3129"}},
		})).To(Succeed())

		By("the user sets the defaultConfig of addondeploymentconfigs, as the README tells them (kubectl patch)")
		setDefaultADC := func(ref *addonv1alpha1.ConfigReferent) {
			Eventually(func(g Gomega) {
				cma := get(g, &addonv1alpha1.ClusterManagementAddOn{}, "", "cluster-proxy")
				before := cma.DeepCopy()
				for i := range cma.Spec.SupportedConfigs {
					if cma.Spec.SupportedConfigs[i].Resource == "addondeploymentconfigs" {
						cma.Spec.SupportedConfigs[i].DefaultConfig = ref
					}
				}
				g.Expect(k8s.Patch(ctx(), cma, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}), client.FieldOwner("kubectl-patch"))).To(Succeed())
			}, timeout, interval).Should(Succeed())
		}
		setDefaultADC(&addonv1alpha1.ConfigReferent{Namespace: adcNS, Name: "fleet-proxy"})
		DeferCleanup(func() { setDefaultADC(nil) })

		for _, c := range clusters {
			Eventually(func(g Gomega) {
				env := agentDeployment(g, c).Spec.Template.Spec.Containers[0].Env
				g.Expect(envValue(env, "HTTPS_PROXY")).To(Equal("https://fleet-proxy.corp.example:3129"), "cluster %s", c)
				g.Expect(get(g, &proxyv1alpha1.ClusterProxyStatus{}, c, "cluster-proxy").Status.ProxySettings).To(
					HaveField("Source", adcNS+"/fleet-proxy"), "cluster %s", c)
			}, timeout, interval).Should(Succeed())
		}

		By("a pass of the configuration that renders the ClusterManagementAddOn leaves the user's field in place")
		Eventually(func(g Gomega) {
			live := get(g, &proxyv1alpha1.ManagedProxyConfiguration{}, "", hub.Name)
			live.Spec.ProxyServer.Replicas++
			g.Expect(k8s.Update(ctx(), live)).To(Succeed())
		}, timeout, interval).Should(Succeed())
		expectReady(hub)
		cma := get(Default, &addonv1alpha1.ClusterManagementAddOn{}, "", "cluster-proxy")
		Expect(cma.Spec.SupportedConfigs).To(ContainElement(And(
			HaveField("Resource", "addondeploymentconfigs"),
			HaveField("DefaultConfig", &addonv1alpha1.ConfigReferent{Namespace: adcNS, Name: "fleet-proxy"}))))

		By("at steady state, a label on the ClusterManagementAddOn (a pass of the configuration and of every cluster) writes nothing")
		expectQuiet()
		before := requests.Writes()
		Eventually(func(g Gomega) {
			live := get(g, &addonv1alpha1.ClusterManagementAddOn{}, "", "cluster-proxy")
			live.Labels["team"] = "platform-" + mpcSuffix()
			g.Expect(k8s.Update(ctx(), live, client.FieldOwner("kubectl-label"))).To(Succeed())
		}, timeout, interval).Should(Succeed())
		Consistently(requests.Writes, 3*time.Second, 250*time.Millisecond).Should(Equal(before))
		Expect(get(Default, &addonv1alpha1.ClusterManagementAddOn{}, "", "cluster-proxy").Spec.SupportedConfigs).To(ContainElement(
			HaveField("DefaultConfig", &addonv1alpha1.ConfigReferent{Namespace: adcNS, Name: "fleet-proxy"})))
	})

	It("restores the agent work when someone else edits it, keeping the labels they added", func() {
		cluster := "c-" + mpcSuffix()
		newCluster(cluster)
		installAddOn(cluster)
		var rendered int
		Eventually(func(g Gomega) {
			_, m := agentManifests(g, cluster)
			g.Expect(m).To(HaveKey("Deployment/cluster-proxy-proxy-agent"))
			rendered = len(m)
		}, timeout, interval).Should(Succeed())

		By("another writer drops the agent Deployment from the work and labels it")
		Eventually(func(g Gomega) {
			work := get(g, &workv1.ManifestWork{}, cluster, agentWork)
			work.Spec.Workload.Manifests = work.Spec.Workload.Manifests[:1]
			work.Labels["team"] = "platform"
			g.Expect(k8s.Update(ctx(), work, client.FieldOwner("kubectl-edit"))).To(Succeed())
		}, timeout, interval).Should(Succeed())

		Eventually(func(g Gomega) {
			work, m := agentManifests(g, cluster)
			g.Expect(m).To(HaveLen(rendered), "every rendered manifest is back")
			g.Expect(m).To(HaveKey("Deployment/cluster-proxy-proxy-agent"))
			g.Expect(work.Labels).To(HaveKeyWithValue("team", "platform"), "labels others add stay")
			g.Expect(metav1.GetControllerOf(work)).To(HaveField("Kind", "ManagedClusterAddOn"))
		}, timeout, interval).Should(Succeed())
	})

	It("renders every AddOnDeploymentConfig field, and updates the work when the config changes", func() {
		cluster := "c-" + mpcSuffix()
		newCluster(cluster)
		proxyCA, err := certs.NewCA("corporate-proxy-ca", 24*time.Hour, fakeClock.Now())
		Expect(err).NotTo(HaveOccurred())
		adc := &addonv1alpha1.AddOnDeploymentConfig{
			ObjectMeta: metav1.ObjectMeta{Name: "proxy-config", Namespace: cluster},
			Spec: addonv1alpha1.AddOnDeploymentConfigSpec{
				AgentInstallNamespace: "proxy-agent-ns",
				ProxyConfig: addonv1alpha1.ProxyConfig{
					HTTPSProxy: "https://user:secret@proxy.corp.example:3129", NoProxy: "10.0.0.0/8", CABundle: proxyCA.CertPEM},
				NodePlacement: &addonv1alpha1.NodePlacement{
					NodeSelector: map[string]string{"node-role.kubernetes.io/infra": ""},
					Tolerations:  []corev1.Toleration{{Key: "infra", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
				},
				Registries: []addonv1alpha1.ImageMirror{{Source: "quay.io/ocm", Mirror: "mirror.corp.example:5000/ocm"}},
				ResourceRequirements: []addonv1alpha1.ContainerResourceRequirements{{
					ContainerID: "deployments:cluster-proxy-proxy-agent:proxy-agent",
					Resources:   corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: mustQuantity("64Mi")}},
				}},
			},
		}
		Expect(k8s.Create(ctx(), adc)).To(Succeed())
		installAddOn(cluster, addonv1alpha1.AddOnConfig{
			ConfigGroupResource: addonv1alpha1.ConfigGroupResource{Group: "addon.open-cluster-management.io", Resource: "addondeploymentconfigs"},
			ConfigReferent:      addonv1alpha1.ConfigReferent{Namespace: cluster, Name: "proxy-config"},
		})

		Eventually(func(g Gomega) {
			_, m := agentManifests(g, cluster)
			g.Expect(m).To(HaveKey("Namespace/proxy-agent-ns"))
			caSecret := &corev1.Secret{}
			g.Expect(runtimeDefaultConvert(m["Secret/cluster-proxy-ca"], caSecret)).To(Succeed())
			hubTrust, err := certs.ParseCertificates(caSecret.Data["ca.crt"])
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(hubTrust).NotTo(ContainElement(HaveField("Subject.CommonName", "corporate-proxy-ca")),
				"the HTTPS proxy's CA never vouches for the hub")
			proxyTrust, err := certs.ParseCertificates(caSecret.Data["proxy-ca.crt"])
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(proxyTrust).To(ConsistOf(HaveField("Subject.CommonName", "corporate-proxy-ca")), "the HTTPS proxy's CA is trusted for the proxy hop")

			d := agentDeployment(g, cluster)
			c := d.Spec.Template.Spec.Containers[0]
			g.Expect(c.Image).To(Equal("mirror.corp.example:5000/ocm/cluster-proxy:v1"))
			g.Expect(proxyURLs(g, cluster, c)).To(HaveKeyWithValue("HTTPS_PROXY", "https://user:secret@proxy.corp.example:3129"),
				"the URL with its credentials, from the credentials Secret")
			g.Expect(envValue(c.Env, "HTTPS_PROXY")).To(BeEmpty(), "no credential in the Deployment")
			noProxy := envValue(c.Env, "NO_PROXY")
			g.Expect(noProxy).To(And(ContainSubstring("10.0.0.0/8"), ContainSubstring("kubernetes.default.svc")))
			g.Expect(envValue(c.Env, "no_proxy")).To(Equal(noProxy))
			g.Expect(c.Args).To(ContainElement(ContainSubstring("&host=" + cluster + ".proxy-agent-ns")))
			g.Expect(c.Resources.Requests.Memory().String()).To(Equal("64Mi"))
			g.Expect(d.Spec.Template.Spec.NodeSelector).To(HaveKey("node-role.kubernetes.io/infra"))
			g.Expect(d.Spec.Template.Spec.Tolerations).To(ConsistOf(HaveField("Key", "infra")))

			cps := get(g, &proxyv1alpha1.ClusterProxyStatus{}, cluster, "cluster-proxy")
			g.Expect(cps.Status.ProxySettings).NotTo(BeNil())
			g.Expect(cps.Status.ProxySettings.HTTPSProxy).NotTo(ContainSubstring("secret"), "credentials never reach the status")
			g.Expect(cps.Status.ProxySettings.Source).To(Equal(cluster + "/proxy-config"))
			g.Expect(cps.Status.ProxySettings.CABundleFingerprint).To(HavePrefix("SHA256:"))
			g.Expect(cps.Status.AgentNamespace).To(Equal("proxy-agent-ns"))
			g.Expect(statusCondition(g, cluster, "ProxySettingsApplied").Reason).To(Equal("ProxySettingsApplied"))
		}, timeout, interval).Should(Succeed())

		By("an HTTP proxy: the proxy CA is not mixed into the trust bundle; the work is updated")
		Eventually(func(g Gomega) {
			live := get(g, &addonv1alpha1.AddOnDeploymentConfig{}, cluster, "proxy-config")
			live.Spec.ProxyConfig = addonv1alpha1.ProxyConfig{HTTPProxy: "http://proxy.corp.example:3128", CABundle: proxyCA.CertPEM}
			g.Expect(k8s.Update(ctx(), live)).To(Succeed())
		}, timeout, interval).Should(Succeed())
		Eventually(func(g Gomega) {
			_, m := agentManifests(g, cluster)
			caSecret := &corev1.Secret{}
			g.Expect(runtimeDefaultConvert(m["Secret/cluster-proxy-ca"], caSecret)).To(Succeed())
			g.Expect(caSecret.Data["ca.crt"]).To(Equal(bundle))
			g.Expect(caSecret.Data).NotTo(HaveKey("proxy-ca.crt"), "an http proxy has no TLS hop to trust")
			c := agentDeployment(g, cluster).Spec.Template.Spec.Containers[0]
			g.Expect(envValue(c.Env, "HTTP_PROXY")).To(Equal("http://proxy.corp.example:3128"))
			g.Expect(envValue(c.Env, "HTTPS_PROXY")).To(BeEmpty())
		}, timeout, interval).Should(Succeed())
	})

	It("mirrors the agent image by the cluster's image-registries annotation, the AddOnDeploymentConfig's registries first", func() {
		cluster := "c-" + mpcSuffix()
		newCluster(cluster)
		annotate := func(value string) {
			EventuallyWithOffset(1, func(g Gomega) {
				mc := get(g, &clusterv1.ManagedCluster{}, "", cluster)
				if mc.Annotations == nil {
					mc.Annotations = map[string]string{}
				}
				mc.Annotations[clusterv1.ClusterImageRegistriesAnnotationKey] = value
				g.Expect(k8s.Update(ctx(), mc)).To(Succeed())
			}, timeout, interval).Should(Succeed())
		}
		expectImage := func(image string) {
			EventuallyWithOffset(1, func(g Gomega) {
				g.Expect(agentDeployment(g, cluster).Spec.Template.Spec.Containers[0].Image).To(Equal(image))
				g.Expect(get(g, &proxyv1alpha1.ClusterProxyStatus{}, cluster, "cluster-proxy").Status.AgentImage).To(Equal(image))
				g.Expect(addOnCondition(g, cluster, "Configured").Status).To(Equal(metav1.ConditionTrue))
			}, timeout, interval).Should(Succeed())
		}
		adc := &addonv1alpha1.AddOnDeploymentConfig{
			ObjectMeta: metav1.ObjectMeta{Name: "mirrors", Namespace: cluster},
			Spec: addonv1alpha1.AddOnDeploymentConfigSpec{
				Registries: []addonv1alpha1.ImageMirror{{Source: "docker.io", Mirror: "adc-mirror.example/docker"}}},
		}
		Expect(k8s.Create(ctx(), adc)).To(Succeed())
		installAddOn(cluster, addonv1alpha1.AddOnConfig{
			ConfigGroupResource: addonv1alpha1.ConfigGroupResource{Group: "addon.open-cluster-management.io", Resource: "addondeploymentconfigs"},
			ConfigReferent:      addonv1alpha1.ConfigReferent{Namespace: cluster, Name: "mirrors"},
		})
		expectImage("quay.io/ocm/cluster-proxy:v1")

		By("the annotation a cluster admin sets for every add-on of the cluster rolls the agent to the mirror")
		annotate(`{"registries":[{"source":"quay.io/ocm","mirror":"cluster-mirror.example/ocm"}]}`)
		expectImage("cluster-mirror.example/ocm/cluster-proxy:v1")

		By("an AddOnDeploymentConfig registry that matches the image wins over the annotation")
		Eventually(func(g Gomega) {
			live := get(g, &addonv1alpha1.AddOnDeploymentConfig{}, cluster, "mirrors")
			live.Spec.Registries = append(live.Spec.Registries, addonv1alpha1.ImageMirror{Source: "quay.io/ocm", Mirror: "adc-mirror.example/ocm"})
			g.Expect(k8s.Update(ctx(), live)).To(Succeed())
		}, timeout, interval).Should(Succeed())
		expectImage("adc-mirror.example/ocm/cluster-proxy:v1")
		var good *workv1.ManifestWork
		Eventually(func(g Gomega) { good, _ = agentManifests(g, cluster) }, timeout, interval).Should(Succeed())

		By("a malformed annotation is reported on the add-on, naming the cluster and the annotation; the last good work stays")
		annotate(`{"registries":[{"source":"quay.io/ocm","mirror":"HTTPS://mirror"}]}`)
		Eventually(func(g Gomega) {
			configured := addOnCondition(g, cluster, "Configured")
			g.Expect(configured.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(configured.Reason).To(Equal("InvalidImageRegistries"))
			g.Expect(configured.Message).To(And(ContainSubstring("ManagedCluster "+cluster),
				ContainSubstring("metadata.annotations[open-cluster-management.io/image-registries].registries[0].mirror")))
			g.Expect(statusCondition(g, cluster, "ProxySettingsApplied").Reason).To(Equal("InvalidImageRegistries"))
		}, timeout, interval).Should(Succeed())
		Expect(get(Default, &workv1.ManifestWork{}, cluster, agentWork).ResourceVersion).To(Equal(good.ResourceVersion))

		By("removing the annotation clears the problem")
		Eventually(func(g Gomega) {
			mc := get(g, &clusterv1.ManagedCluster{}, "", cluster)
			delete(mc.Annotations, clusterv1.ClusterImageRegistriesAnnotationKey)
			g.Expect(k8s.Update(ctx(), mc)).To(Succeed())
		}, timeout, interval).Should(Succeed())
		expectImage("adc-mirror.example/ocm/cluster-proxy:v1")
	})

	It("never shows a proxy URL's user name or password in a status, an Event or the manager's log", func() {
		const user, password = "proxy-user-4417", "proxy-pass-8823"
		managerLog.watch(user, password)
		cluster := "c-" + mpcSuffix()
		newCluster(cluster)
		Expect(k8s.Create(ctx(), &addonv1alpha1.AddOnDeploymentConfig{
			ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: cluster},
			Spec: addonv1alpha1.AddOnDeploymentConfigSpec{ProxyConfig: addonv1alpha1.ProxyConfig{
				HTTPProxy:  "http://" + user + ":" + password + "@proxy.corp.example:3128",
				HTTPSProxy: "https://" + user + ":" + password + "@proxy.corp.example:3129",
			}},
		})).To(Succeed())
		installAddOn(cluster, addonv1alpha1.AddOnConfig{
			ConfigGroupResource: addonv1alpha1.ConfigGroupResource{Group: "addon.open-cluster-management.io", Resource: "addondeploymentconfigs"},
			ConfigReferent:      addonv1alpha1.ConfigReferent{Namespace: cluster, Name: "creds"},
		})
		// readable is what a hub user reads of the cluster's add-on: its ClusterProxyStatus and ManagedClusterAddOn
		// whole, the configuration's status and every Event of the cluster's namespace.
		readable := func(g Gomega) string {
			events := &corev1.EventList{}
			g.Expect(k8s.List(ctx(), events, client.InNamespace(cluster))).To(Succeed())
			raw, err := json.Marshal([]any{
				get(g, &proxyv1alpha1.ClusterProxyStatus{}, cluster, "cluster-proxy"),
				get(g, &addonv1alpha1.ManagedClusterAddOn{}, cluster, "cluster-proxy"),
				get(g, &proxyv1alpha1.ManagedProxyConfiguration{}, "", hub.Name).Status,
				events.Items,
			})
			g.Expect(err).NotTo(HaveOccurred())
			return string(raw)
		}

		Eventually(func(g Gomega) {
			c := agentDeployment(g, cluster).Spec.Template.Spec.Containers[0]
			g.Expect(proxyURLs(g, cluster, c)["HTTPS_PROXY"]).To(ContainSubstring(user+":"+password+"@"), "the agent needs them")
			raw, err := json.Marshal(c)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(string(raw)).NotTo(ContainSubstring(password), "from a Secret, not the Deployment")
			shown := get(g, &proxyv1alpha1.ClusterProxyStatus{}, cluster, "cluster-proxy").Status.ProxySettings
			g.Expect(shown).NotTo(BeNil())
			g.Expect(shown.HTTPProxy).To(Equal("http://***@proxy.corp.example:3128"), "the whole userinfo goes, the user name too")
			g.Expect(shown.HTTPSProxy).To(Equal("https://***@proxy.corp.example:3129"))
		}, timeout, interval).Should(Succeed())
		Expect(readable(Default)).NotTo(Or(ContainSubstring(user), ContainSubstring(password)))

		By("a URL the agent cannot use is named in the condition and the Event, without its credentials")
		Eventually(func(g Gomega) {
			live := get(g, &addonv1alpha1.AddOnDeploymentConfig{}, cluster, "creds")
			live.Spec.ProxyConfig.HTTPSProxy = "https://" + user + ":" + password + "@proxy.corp.example:3129/a/path"
			g.Expect(k8s.Update(ctx(), live)).To(Succeed())
		}, timeout, interval).Should(Succeed())
		Eventually(func(g Gomega) {
			applied := statusCondition(g, cluster, "ProxySettingsApplied")
			g.Expect(applied.Reason).To(Equal(proxyv1alpha1.ReasonInvalidProxyURL))
			g.Expect(applied.Message).To(ContainSubstring(`"https://***@proxy.corp.example:3129/a/path"`))
			g.Expect(eventReasons(get(g, &addonv1alpha1.ManagedClusterAddOn{}, cluster, "cluster-proxy"))).To(
				ContainElement(proxyv1alpha1.ReasonInvalidProxyURL))
		}, timeout, interval).Should(Succeed())
		Expect(readable(Default)).NotTo(Or(ContainSubstring(user), ContainSubstring(password)))
		Expect(managerLog.lines()).To(BeEmpty(), "the manager logs neither")
	})

	It("takes no AddOnDeploymentConfig of another cluster's namespace, and keeps the last good agent", func() {
		cluster, other := "c-"+mpcSuffix(), "c-"+mpcSuffix()
		newCluster(cluster)
		newCluster(other)
		for ns, proxy := range map[string]string{cluster: "http://own-proxy.example:3128", other: "https://them:their-secret@their-proxy.example:3129"} {
			Expect(k8s.Create(ctx(), &addonv1alpha1.AddOnDeploymentConfig{
				ObjectMeta: metav1.ObjectMeta{Name: "cfg", Namespace: ns},
				Spec:       addonv1alpha1.AddOnDeploymentConfigSpec{ProxyConfig: addonv1alpha1.ProxyConfig{HTTPProxy: proxy}},
			})).To(Succeed())
		}
		installAddOn(cluster, addonv1alpha1.AddOnConfig{
			ConfigGroupResource: addonv1alpha1.ConfigGroupResource{Group: "addon.open-cluster-management.io", Resource: "addondeploymentconfigs"},
			ConfigReferent:      addonv1alpha1.ConfigReferent{Namespace: cluster, Name: "cfg"},
		})
		Eventually(func(g Gomega) {
			g.Expect(envValue(agentDeployment(g, cluster).Spec.Template.Spec.Containers[0].Env, "HTTP_PROXY")).To(Equal("http://own-proxy.example:3128"))
		}, timeout, interval).Should(Succeed())

		By("whoever may edit the cluster's add-on points it at the other namespace's configuration, and its proxy password")
		Eventually(func(g Gomega) {
			mca := get(g, &addonv1alpha1.ManagedClusterAddOn{}, cluster, "cluster-proxy")
			mca.Spec.Configs[0].Namespace = other
			g.Expect(k8s.Update(ctx(), mca)).To(Succeed())
		}, timeout, interval).Should(Succeed())
		Eventually(func(g Gomega) {
			applied := statusCondition(g, cluster, "ProxySettingsApplied")
			g.Expect(applied.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(applied.Reason).To(Equal(proxyv1alpha1.ReasonConfigOfAnotherNamespace))
			g.Expect(applied.Message).To(ContainSubstring("spec.configs[0].namespace"))
		}, timeout, interval).Should(Succeed())
		Consistently(func(g Gomega) {
			work, _ := agentManifests(g, cluster)
			raw, err := json.Marshal(work.Spec)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(string(raw)).NotTo(ContainSubstring("their-secret"))
			g.Expect(envValue(agentDeployment(g, cluster).Spec.Template.Spec.Containers[0].Env, "HTTP_PROXY")).To(Equal("http://own-proxy.example:3128"))
		}, 2*time.Second, interval).Should(Succeed())
	})

	DescribeTable("keeps the last good work and names the field of a bad configuration",
		func(breakIt func(*addonv1alpha1.AddOnDeploymentConfig), reason, field string) {
			cluster := "c-" + mpcSuffix()
			newCluster(cluster)
			adc := &addonv1alpha1.AddOnDeploymentConfig{
				ObjectMeta: metav1.ObjectMeta{Name: "cfg", Namespace: cluster},
				Spec:       addonv1alpha1.AddOnDeploymentConfigSpec{ProxyConfig: addonv1alpha1.ProxyConfig{HTTPProxy: "http://proxy.example:3128"}},
			}
			Expect(k8s.Create(ctx(), adc)).To(Succeed())
			installAddOn(cluster, addonv1alpha1.AddOnConfig{
				ConfigGroupResource: addonv1alpha1.ConfigGroupResource{Group: "addon.open-cluster-management.io", Resource: "addondeploymentconfigs"},
				ConfigReferent:      addonv1alpha1.ConfigReferent{Namespace: cluster, Name: "cfg"},
			})
			var good *workv1.ManifestWork
			Eventually(func(g Gomega) {
				good, _ = agentManifests(g, cluster)
				g.Expect(envValue(agentDeployment(g, cluster).Spec.Template.Spec.Containers[0].Env, "HTTP_PROXY")).To(Equal("http://proxy.example:3128"))
			}, timeout, interval).Should(Succeed())

			Eventually(func(g Gomega) {
				live := get(g, &addonv1alpha1.AddOnDeploymentConfig{}, cluster, "cfg")
				breakIt(live)
				g.Expect(k8s.Update(ctx(), live)).To(Succeed())
			}, timeout, interval).Should(Succeed())
			Eventually(func(g Gomega) {
				configured := addOnCondition(g, cluster, "Configured")
				g.Expect(configured.Status).To(Equal(metav1.ConditionFalse))
				g.Expect(configured.Reason).To(Equal(reason))
				g.Expect(configured.Message).To(ContainSubstring(field))
				applied := statusCondition(g, cluster, "ProxySettingsApplied")
				g.Expect(applied.Status).To(Equal(metav1.ConditionFalse))
				g.Expect(applied.Reason).To(Equal(reason))
				g.Expect(applied.Message).To(ContainSubstring(field))
				g.Expect(eventReasons(get(g, &addonv1alpha1.ManagedClusterAddOn{}, cluster, "cluster-proxy"))).To(ContainElement(reason))
			}, timeout, interval).Should(Succeed())
			Consistently(func(g Gomega) {
				work := get(g, &workv1.ManifestWork{}, cluster, agentWork)
				g.Expect(work.ResourceVersion).To(Equal(good.ResourceVersion), "the last good work stays as it was")
			}, 2*time.Second, interval).Should(Succeed())

			By("the Warning is recorded once, not again on every pass while the problem lasts")
			mca := get(Default, &addonv1alpha1.ManagedClusterAddOn{}, cluster, "cluster-proxy")
			Expect(eventCount(mca, reason)).To(Equal(1))
			for i := 0; i < 3; i++ {
				poke(mca) // each update of the add-on runs a reconcile
			}
			Consistently(func() int { return eventCount(mca, reason) }, 2*time.Second, interval).Should(Equal(1))
		},
		Entry("a malformed proxy URL", func(a *addonv1alpha1.AddOnDeploymentConfig) { a.Spec.ProxyConfig.HTTPSProxy = "proxy.example:3129" },
			"InvalidProxyURL", "spec.proxyConfig.httpsProxy"),
		Entry("a proxy CA that is not PEM", func(a *addonv1alpha1.AddOnDeploymentConfig) {
			a.Spec.ProxyConfig.HTTPSProxy = "https://proxy.example:3129"
			a.Spec.ProxyConfig.CABundle = []byte("not a certificate")
		}, "InvalidProxyCABundle", "spec.proxyConfig.caBundle"),
		Entry("an unknown registry mirror format", func(a *addonv1alpha1.AddOnDeploymentConfig) {
			a.Spec.Registries = []addonv1alpha1.ImageMirror{{Source: "quay.io/ocm", Mirror: "https://mirror.example/ocm"}}
		}, "InvalidRegistryMirror", "spec.registries[0].mirror"),
		Entry("a customized variable the agent cannot use", func(a *addonv1alpha1.AddOnDeploymentConfig) {
			a.Spec.CustomizedVariables = []addonv1alpha1.CustomizedVariable{{Name: "enableImpersonation", Value: "sometimes"}}
		}, "InvalidCustomizedVariable", "spec.customizedVariables[0].value"),
		Entry("a malformed OIDC issuer URL", func(a *addonv1alpha1.AddOnDeploymentConfig) {
			a.Spec.CustomizedVariables = []addonv1alpha1.CustomizedVariable{
				{Name: "oidcClientID", Value: "cluster-proxy"}, {Name: "oidcIssuerURL", Value: "http://issuer.example.com"}}
		}, "InvalidCustomizedVariable", "spec.customizedVariables[1].value"),
	)

	It("reports a missing referenced AddOnDeploymentConfig by the field that references it", func() {
		cluster := "c-" + mpcSuffix()
		newCluster(cluster)
		installAddOn(cluster, addonv1alpha1.AddOnConfig{
			ConfigGroupResource: addonv1alpha1.ConfigGroupResource{Group: "addon.open-cluster-management.io", Resource: "addondeploymentconfigs"},
			ConfigReferent:      addonv1alpha1.ConfigReferent{Namespace: cluster, Name: "missing"},
		})
		Eventually(func(g Gomega) {
			configured := addOnCondition(g, cluster, "Configured")
			g.Expect(configured.Reason).To(Equal("ConfigurationNotFound"))
			g.Expect(configured.Message).To(And(ContainSubstring("spec.configs[0]"), ContainSubstring(cluster+"/missing")))
			g.Expect(statusCondition(g, cluster, "ProxySettingsApplied").Reason).To(Equal("ConfigurationNotFound"))
		}, timeout, interval).Should(Succeed())
		Expect(k8s.Get(ctx(), client.ObjectKey{Namespace: cluster, Name: agentWork}, &workv1.ManifestWork{})).NotTo(Succeed(),
			"nothing is deployed from a configuration that does not exist")
	})

	It("approves and signs agent CSRs of accepted clusters, and denies the rest with a reason", func() {
		cluster := "c-" + mpcSuffix()
		newCluster(cluster)
		installAddOn(cluster)
		subject := advertisedAgentSubject(cluster)
		agent := clusterClient(cluster)
		signer := "open-cluster-management.io/proxy-agent-signer"

		good := newCSR(cluster, "good-"+cluster, signer, subject.User, subject.Groups, subject.OrganizationUnits)
		Expect(agent.Create(ctx(), good)).To(Succeed())
		var notAfter time.Time
		Eventually(func(g Gomega) {
			csr, state := csrState(g, good.Name)
			g.Expect(state).To(Equal(certificatesv1.CertificateApproved))
			g.Expect(csr.Status.Certificate).NotTo(BeEmpty())
			chain, err := certs.ParseCertificates(csr.Status.Certificate)
			g.Expect(err).NotTo(HaveOccurred())
			roots := x509.NewCertPool()
			roots.AppendCertsFromPEM(bundle)
			_, err = chain[0].Verify(x509.VerifyOptions{Roots: roots, CurrentTime: fakeClock.Now(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
			g.Expect(err).NotTo(HaveOccurred(), "signed by the configuration's CA")
			g.Expect(chain[0].Subject.CommonName).To(Equal(subject.User))
			g.Expect(chain[0].ExtKeyUsage).To(Equal([]x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}))
			g.Expect(chain[0].NotAfter).To(BeTemporally("~", fakeClock.Now().Add(180*24*time.Hour), time.Hour))

			g.Expect(statusCondition(g, cluster, "CertificateReady").Status).To(Equal(metav1.ConditionTrue))
			// Read after the condition, and checked for nil: a status read before it may not carry the expiry yet.
			cps := get(g, &proxyv1alpha1.ClusterProxyStatus{}, cluster, "cluster-proxy")
			g.Expect(cps.Status.AgentCertificateNotAfter).NotTo(BeNil())
			g.Expect(cps.Status.AgentCertificateNotAfter.Time).To(BeTemporally("~", chain[0].NotAfter, time.Second))
			notAfter = cps.Status.AgentCertificateNotAfter.Time
		}, timeout, interval).Should(Succeed())

		// Creation times have seconds: the requests below must be later than the first to supersede it.
		Eventually(time.Now).Should(BeTemporally(">=", good.CreationTimestamp.Add(time.Second)))
		hubClient := newCSR(cluster, "kubeclient-"+cluster, "kubernetes.io/kube-apiserver-client",
			"system:open-cluster-management:cluster:"+cluster+":addon:cluster-proxy:agent:agent1",
			[]string{"system:open-cluster-management:cluster:" + cluster + ":addon:cluster-proxy"}, nil)
		Expect(agent.Create(ctx(), hubClient)).To(Succeed())
		wrongSubject := newCSR(cluster, "wrong-"+cluster, signer, "open-cluster-management:cluster-proxy:agent:someone-else", subject.Groups, subject.OrganizationUnits)
		Expect(agent.Create(ctx(), wrongSubject)).To(Succeed())
		otherCluster := "c-" + mpcSuffix()
		newCluster(otherCluster)
		hijack := newCSR(otherCluster, "hijack-"+cluster, signer, "open-cluster-management:cluster-proxy:agent:"+otherCluster, subject.Groups, subject.OrganizationUnits)
		Expect(agent.Create(ctx(), hijack)).To(Succeed(), "cluster %s's agent asks for a certificate of %s", cluster, otherCluster)
		unrelated := newCSR(cluster, "unrelated-"+cluster, "example.com/other", "someone", nil, nil)
		unrelated.Labels = nil
		Expect(agent.Create(ctx(), unrelated)).To(Succeed())

		Eventually(func(g Gomega) {
			csr, state := csrState(g, hubClient.Name)
			g.Expect(state).To(Equal(certificatesv1.CertificateApproved))
			g.Expect(csr.Status.Certificate).To(BeEmpty(), "kube-apiserver-client certificates are signed by kube-controller-manager")

			csr, state = csrState(g, wrongSubject.Name)
			g.Expect(state).To(Equal(certificatesv1.CertificateDenied))
			g.Expect(csr.Status.Conditions[0].Reason).To(Equal("UnexpectedSubject"))
			csr, state = csrState(g, hijack.Name)
			g.Expect(state).To(Equal(certificatesv1.CertificateDenied))
			g.Expect(csr.Status.Conditions[0].Reason).To(Equal("UnexpectedRequestor"), "an agent cannot ask for another cluster's certificate")
		}, timeout, interval).Should(Succeed())

		By("the signed request, superseded by a later one, is deleted; the status keeps the certificate it carried")
		Eventually(func() error {
			return k8s.Get(ctx(), client.ObjectKeyFromObject(good), &certificatesv1.CertificateSigningRequest{})
		}, timeout, interval).Should(Satisfy(apierrors.IsNotFound))
		poke(get(Default, &addonv1alpha1.ManagedClusterAddOn{}, cluster, "cluster-proxy"))
		Consistently(func(g Gomega) {
			g.Expect(statusCondition(g, cluster, "CertificateReady").Status).To(Equal(metav1.ConditionTrue))
			g.Expect(get(g, &proxyv1alpha1.ClusterProxyStatus{}, cluster, "cluster-proxy").Status.AgentCertificateNotAfter.Time).To(BeTemporally("==", notAfter))
		}, 2*time.Second, interval).Should(Succeed())
		Consistently(func(g Gomega) {
			_, state := csrState(g, unrelated.Name)
			g.Expect(state).To(BeEmpty(), "CSRs of other signers are left alone")
		}, time.Second, interval).Should(Succeed())
		Eventually(func() []string {
			return eventReasons(get(Default, &certificatesv1.CertificateSigningRequest{}, "", wrongSubject.Name))
		}, timeout, interval).
			Should(ContainElement("UnexpectedSubject"), "the denial says why in an Event")

		By("a cluster the hub no longer accepts gets no certificate")
		Eventually(func(g Gomega) {
			mc := get(g, &clusterv1.ManagedCluster{}, "", cluster)
			mc.Spec.HubAcceptsClient = false
			g.Expect(k8s.Update(ctx(), mc)).To(Succeed())
		}, timeout, interval).Should(Succeed())
		late := newCSR(cluster, "late-"+cluster, signer, subject.User, subject.Groups, subject.OrganizationUnits)
		Expect(agent.Create(ctx(), late)).To(Succeed())
		Eventually(func(g Gomega) {
			csr, state := csrState(g, late.Name)
			g.Expect(state).To(Equal(certificatesv1.CertificateDenied))
			g.Expect(csr.Status.Conditions[0].Reason).To(Equal("ClusterNotAccepted"))
		}, timeout, interval).Should(Succeed())
	})

	It("deletes each finished CSR of an agent that a later request supersedes, so OCM's klusterlet never meets its limit of 10 on the hub", func() {
		cluster := "c-" + mpcSuffix()
		newCluster(cluster)
		installAddOn(cluster)
		subject := advertisedAgentSubject(cluster)
		agent := clusterClient(cluster)
		var previous *certificatesv1.CertificateSigningRequest
		for i := range 12 { // a CA rotation a few minutes apart, twelve times within the hour the hub keeps an issued CSR
			if previous != nil {
				// Creation times have seconds: the klusterlet's next request comes in a later one.
				Eventually(time.Now).Should(BeTemporally(">=", previous.CreationTimestamp.Add(time.Second)))
			}
			csr := newCSR(cluster, fmt.Sprintf("renewal-%d-%s", i, cluster), "open-cluster-management.io/proxy-agent-signer",
				subject.User, subject.Groups, subject.OrganizationUnits)
			Expect(agent.Create(ctx(), csr)).To(Succeed())
			Eventually(func(g Gomega) {
				issued, state := csrState(g, csr.Name)
				g.Expect(state).To(Equal(certificatesv1.CertificateApproved))
				g.Expect(issued.Status.Certificate).NotTo(BeEmpty())
				list := &certificatesv1.CertificateSigningRequestList{}
				g.Expect(k8s.List(ctx(), list, client.MatchingLabels{"open-cluster-management.io/cluster-name": cluster,
					"open-cluster-management.io/addon-name": "cluster-proxy"})).To(Succeed())
				g.Expect(list.Items).To(HaveLen(1), "request %d: only the latest is left", i+1)
			}, timeout, interval).Should(Succeed())
			previous = csr
		}
		Expect(statusCondition(Default, cluster, "CertificateReady").Status).To(Equal(metav1.ConditionTrue))
	})

	It("installs on the clusters a Placement selects, and removes the add-on from clusters that leave", func() {
		a, b, manual := "p-"+mpcSuffix(), "p-"+mpcSuffix(), "p-"+mpcSuffix()
		for _, c := range []string{a, b, manual} {
			newCluster(c)
		}
		installAddOn(manual)
		decision := &clusterv1beta1.PlacementDecision{ObjectMeta: metav1.ObjectMeta{
			Name: "proxy-decision-1", Namespace: "default", Labels: map[string]string{clusterv1beta1.PlacementLabel: "proxy-placement"}}}
		Expect(k8s.Create(ctx(), decision)).To(Succeed())
		DeferCleanupDelete(decision)
		decision.Status.Decisions = []clusterv1beta1.ClusterDecision{{ClusterName: a}, {ClusterName: b}}
		Expect(k8s.Status().Update(ctx(), decision)).To(Succeed())

		Eventually(func(g Gomega) {
			cma := get(g, &addonv1alpha1.ClusterManagementAddOn{}, "", "cluster-proxy")
			cma.Spec.InstallStrategy = addonv1alpha1.InstallStrategy{Type: addonv1alpha1.AddonInstallStrategyPlacements,
				Placements: []addonv1alpha1.PlacementStrategy{{PlacementRef: addonv1alpha1.PlacementRef{Namespace: "default", Name: "proxy-placement"}}}}
			g.Expect(k8s.Update(ctx(), cma)).To(Succeed())
		}, timeout, interval).Should(Succeed())
		DeferCleanup(func() {
			cma := &addonv1alpha1.ClusterManagementAddOn{}
			if k8s.Get(ctx(), client.ObjectKey{Name: "cluster-proxy"}, cma) == nil {
				cma.Spec.InstallStrategy = addonv1alpha1.InstallStrategy{Type: addonv1alpha1.AddonInstallStrategyManual}
				_ = k8s.Update(ctx(), cma)
			}
		})

		Eventually(func(g Gomega) {
			get(g, &addonv1alpha1.ManagedClusterAddOn{}, a, "cluster-proxy")
			get(g, &addonv1alpha1.ManagedClusterAddOn{}, b, "cluster-proxy")
			get(g, &workv1.ManifestWork{}, b, agentWork)
		}, timeout, interval).Should(Succeed())
		Consistently(func(g Gomega) {
			g.Expect(get(g, &addonv1alpha1.ClusterManagementAddOn{}, "", "cluster-proxy").Spec.InstallStrategy.Type).To(Equal("Placements"),
				"the install strategy is the user's: the operator does not put it back")
		}, 2*time.Second, interval).Should(Succeed())

		By("cluster b leaves the placement")
		Eventually(func(g Gomega) {
			live := get(g, &clusterv1beta1.PlacementDecision{}, "default", "proxy-decision-1")
			live.Status.Decisions = []clusterv1beta1.ClusterDecision{{ClusterName: a}}
			g.Expect(k8s.Status().Update(ctx(), live)).To(Succeed())
		}, timeout, interval).Should(Succeed())
		expectGone(&addonv1alpha1.ManagedClusterAddOn{ObjectMeta: metav1.ObjectMeta{Namespace: b, Name: "cluster-proxy"}})
		expectGone(&workv1.ManifestWork{ObjectMeta: metav1.ObjectMeta{Namespace: b, Name: agentWork}})
		get(Default, &addonv1alpha1.ManagedClusterAddOn{}, a, "cluster-proxy")
		get(Default, &addonv1alpha1.ManagedClusterAddOn{}, manual, "cluster-proxy")

		By("every add-on, the one a user created too, is owned by the ClusterManagementAddOn, so it goes with it")
		cma := get(Default, &addonv1alpha1.ClusterManagementAddOn{}, "", "cluster-proxy")
		Eventually(func(g Gomega) {
			for _, c := range []string{a, manual} {
				owners := get(g, &addonv1alpha1.ManagedClusterAddOn{}, c, "cluster-proxy").OwnerReferences
				g.Expect(owners).To(ContainElement(And(
					HaveField("Kind", "ClusterManagementAddOn"), HaveField("Name", "cluster-proxy"), HaveField("UID", cma.UID))), c)
			}
		}, timeout, interval).Should(Succeed())
	})

	It("re-enrolls agents after a CA rotation, keeping the old CA trusted until their new certificates are signed", func() {
		cluster := "rot-" + mpcSuffix()
		newCluster(cluster)
		installAddOn(cluster)
		signer := "open-cluster-management.io/proxy-agent-signer"
		agentSubject := func(g Gomega) addonv1alpha1.Subject {
			for _, r := range get(g, &addonv1alpha1.ManagedClusterAddOn{}, cluster, "cluster-proxy").Status.Registrations {
				if r.SignerName == signer {
					return r.Subject
				}
			}
			return addonv1alpha1.Subject{}
		}
		var old addonv1alpha1.Subject
		Eventually(func(g Gomega) { old = agentSubject(g); g.Expect(old.User).NotTo(BeEmpty()) }, timeout, interval).Should(Succeed())
		agent := clusterClient(cluster)
		first := newCSR(cluster, "first-"+cluster, signer, old.User, old.Groups, old.OrganizationUnits)
		Expect(agent.Create(ctx(), first)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(statusCondition(g, cluster, "CertificateReady").Status).To(Equal(metav1.ConditionTrue))
		}, timeout, interval).Should(Succeed())
		oldCA := get(Default, &proxyv1alpha1.ManagedProxyConfiguration{}, "", hub.Name).Status.Signer.CAFingerprint

		By("every other cluster of this suite leaves, so only this agent's certificate holds the old CA")
		clusters := &clusterv1.ManagedClusterList{}
		Expect(k8s.List(ctx(), clusters)).To(Succeed())
		for i := range clusters.Items {
			if clusters.Items[i].Name != cluster {
				Expect(client.IgnoreNotFound(k8s.Delete(ctx(), &clusters.Items[i]))).To(Succeed())
			}
		}
		Eventually(func(g Gomega) {
			list := &proxyv1alpha1.ClusterProxyStatusList{}
			g.Expect(k8s.List(ctx(), list)).To(Succeed())
			g.Expect(list.Items).To(HaveLen(1))
		}, timeout, interval).Should(Succeed())

		live := get(Default, &proxyv1alpha1.ManagedProxyConfiguration{}, "", hub.Name)
		live.Annotations = map[string]string{proxyv1alpha1.RotateCAAnnotation: "agents"}
		Expect(k8s.Update(ctx(), live)).To(Succeed())

		var renewed addonv1alpha1.Subject
		Eventually(func(g Gomega) {
			renewed = agentSubject(g)
			g.Expect(renewed.OrganizationUnits).NotTo(Equal(old.OrganizationUnits), "a new CA changes the requested subject")
			status := get(g, &proxyv1alpha1.ManagedProxyConfiguration{}, "", hub.Name).Status.Signer
			g.Expect(status.CAFingerprint).NotTo(Equal(oldCA))
			g.Expect(status.BundleFingerprints).To(ConsistOf(status.CAFingerprint, oldCA), "the agent still holds a certificate of the old CA")
		}, timeout, interval).Should(Succeed())
		Consistently(func(g Gomega) {
			g.Expect(get(g, &proxyv1alpha1.ManagedProxyConfiguration{}, "", hub.Name).Status.Signer.BundleFingerprints).To(ContainElement(oldCA))
		}, 2*time.Second, interval).Should(Succeed())

		By("the klusterlet requests anew with the new subject: signed by the new CA, and the old CA leaves the bundle")
		second := newCSR(cluster, "second-"+cluster, signer, renewed.User, renewed.Groups, renewed.OrganizationUnits)
		Expect(agent.Create(ctx(), second)).To(Succeed())
		Eventually(func(g Gomega) {
			signerSecret := get(g, &corev1.Secret{}, hub.Spec.ProxyServer.Namespace, "cluster-proxy-signer")
			g.Expect(signerSecret.Annotations).To(HaveKey("proxy.open-cluster-management.io/previous-ca-unused-since"))
		}, timeout, interval).Should(Succeed(), "no certificate of the old CA is in use: its grace period runs")
		fakeClock.Step(managedproxyconfiguration.CARolloverGrace)
		poke(get(Default, &proxyv1alpha1.ManagedProxyConfiguration{}, "", hub.Name))
		Eventually(func(g Gomega) {
			status := get(g, &proxyv1alpha1.ManagedProxyConfiguration{}, "", hub.Name).Status.Signer
			g.Expect(status.BundleFingerprints).To(Equal([]string{status.CAFingerprint}))
			csr, _ := csrState(g, second.Name)
			chain, err := certs.ParseCertificates(csr.Status.Certificate)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(chain[0].Subject.OrganizationalUnit).To(Equal(renewed.OrganizationUnits))
		}, timeout, interval).Should(Succeed())
	})

	It("removes the work, the add-on and the status when the cluster is removed", func() {
		cluster := "c-" + mpcSuffix()
		newCluster(cluster)
		installAddOn(cluster)
		Eventually(func(g Gomega) {
			get(g, &workv1.ManifestWork{}, cluster, agentWork)
			get(g, &proxyv1alpha1.ClusterProxyStatus{}, cluster, "cluster-proxy")
		}, timeout, interval).Should(Succeed())
		Expect(k8s.Delete(ctx(), &clusterv1.ManagedCluster{ObjectMeta: metav1.ObjectMeta{Name: cluster}})).To(Succeed())
		expectGone(&addonv1alpha1.ManagedClusterAddOn{ObjectMeta: metav1.ObjectMeta{Namespace: cluster, Name: "cluster-proxy"}})
		expectGone(&workv1.ManifestWork{ObjectMeta: metav1.ObjectMeta{Namespace: cluster, Name: agentWork}})
		expectGone(&proxyv1alpha1.ClusterProxyStatus{ObjectMeta: metav1.ObjectMeta{Namespace: cluster, Name: "cluster-proxy"}})
	})

	tunnelHealthSpecs()
})

func envValue(env []corev1.EnvVar, name string) string {
	for _, e := range env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

func mustQuantity(s string) resource.Quantity { return resource.MustParse(s) }

// advertisedAgentSubject waits for the subject the add-on's status asks cluster's agent certificate to carry.
func advertisedAgentSubject(cluster string) addonv1alpha1.Subject {
	GinkgoHelper()
	var subject addonv1alpha1.Subject
	Eventually(func(g Gomega) {
		mca := get(g, &addonv1alpha1.ManagedClusterAddOn{}, cluster, "cluster-proxy")
		for _, r := range mca.Status.Registrations {
			if r.SignerName == "open-cluster-management.io/proxy-agent-signer" {
				subject = r.Subject
			}
		}
		g.Expect(subject.User).NotTo(BeEmpty())
	}, timeout, interval).Should(Succeed())
	return subject
}
