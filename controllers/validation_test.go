package controllers_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/rand"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/repo"
)

// validMPC is a minimal configuration as a user writes it; each table entry breaks one field.
const validMPC = `
apiVersion: proxy.open-cluster-management.io/v1alpha1
kind: ManagedProxyConfiguration
metadata: {name: NAME}
spec:
  authentication: {signer: {type: SelfSigned}}
  proxyServer:
    image: example.com/proxy:1
    namespace: validation-ns
    entrypoint: {type: Hostname, hostname: {value: hub.example.com}, port: 8091}
  proxyAgent: {image: example.com/proxy:1}
`

const validPC = `
apiVersion: proxy.open-cluster-management.io/v1alpha1
kind: ProxyCertificate
metadata: {name: NAME, namespace: default}
spec:
  secretName: tool
  commonName: tool
  duration: 24h
  issuerRef: {name: cluster-proxy}
`

// The service-proxy's flags in the configuration, and the messages that refuse a bad one.
const (
	argsField         = "spec.proxyAgent.additionalServiceProxyArgs"
	notAFlag          = "spec.proxyAgent.additionalServiceProxyArgs takes only service-proxy flags, each written --name=value"
	allowedArgsHint   = "--allowed-service=<namespace>/<name>[:<port>], --service-domain=<domain>, --service-ca-file=<absolute path>, -v=<level> or --v=<level>"
	impersonationHint = "--enable-impersonation is not accepted in spec.proxyAgent.additionalServiceProxyArgs: set the AddOnDeploymentConfig customizedVariable enableImpersonation"
)

// manyArgs is n valid additionalServiceProxyArgs entries.
func manyArgs(n int) []any {
	args := make([]any, n)
	for i := range args {
		args[i] = "--allowed-service=team/web:" + strconv.Itoa(8000+i)
	}
	return args
}

// withField parses doc, sets the value at the dotted path (nil deletes it) and gives the object a fresh name.
func withField(doc, path string, value any) *unstructured.Unstructured {
	u := fromYAML(doc)
	u.SetName("v-" + rand.String(6))
	fields := strings.Split(path, ".")
	if value == nil {
		unstructured.RemoveNestedField(u.Object, fields...)
	} else {
		Expect(unstructured.SetNestedField(u.Object, value, fields...)).To(Succeed())
	}
	return u
}

var _ = Describe("Validation", func() {
	DescribeTable("rejects a bad object with a message naming the field",
		func(obj *unstructured.Unstructured, wantInMessage ...string) {
			err := k8s.Create(ctx(), obj)
			Expect(err).To(HaveOccurred())
			for _, want := range wantInMessage {
				Expect(err.Error()).To(ContainSubstring(want))
			}
		},
		Entry("Hostname entrypoint without hostname.value",
			withField(validMPC, "spec.proxyServer.entrypoint.hostname", nil), "spec.proxyServer.entrypoint", "entrypoint.hostname.value is required"),
		Entry("entrypoint port 0", withField(validMPC, "spec.proxyServer.entrypoint.port", int64(0)), "spec.proxyServer.entrypoint.port"),
		Entry("entrypoint port above 65535", withField(validMPC, "spec.proxyServer.entrypoint.port", int64(65536)), "spec.proxyServer.entrypoint.port"),
		Entry("deploy port 0", withField(validMPC, "spec.deploy.ports.agentServer", int64(0)), "spec.deploy.ports.agentServer"),
		Entry("deploy port above 65535", withField(validMPC, "spec.deploy.ports.proxyServer", int64(70000)), "spec.deploy.ports.proxyServer"),
		Entry("two deploy ports equal", withField(validMPC, "spec.deploy.ports.adminServer", int64(8090)), "spec.deploy.ports", "five different ports"),
		Entry("the HTTP-CONNECT port equal to another", withField(validMPC, "spec.deploy.ports.httpConnectServer", int64(8091)), "spec.deploy.ports", "five different ports"),
		Entry("an allowed service with an invalid name", withField(validMPC, "spec.userServer", map[string]any{"allowedServices": []any{map[string]any{"namespace": "default", "name": "Bad_Name"}}}), "spec.userServer.allowedServices[0].name", "should match"),
		Entry("an allowed service without a namespace", withField(validMPC, "spec.userServer", map[string]any{"allowedServices": []any{map[string]any{"name": "web"}}}), "spec.userServer.allowedServices[0].namespace", "Required value"),
		Entry("Provided signer without provided.secretRef",
			withField(validMPC, "spec.authentication.signer.type", "Provided"), "spec.authentication.signer", "signer.provided.secretRef is required"),
		Entry("unknown signer type", withField(validMPC, "spec.authentication.signer.type", "Vault"), "spec.authentication.signer.type", `"Vault"`),
		Entry("unknown entrypoint type", withField(validMPC, "spec.proxyServer.entrypoint.type", "Ingress"), "spec.proxyServer.entrypoint.type", `"Ingress"`),
		Entry("negative proxy-server replicas", withField(validMPC, "spec.proxyServer.replicas", int64(-1)), "spec.proxyServer.replicas"),
		Entry("negative agent replicas", withField(validMPC, "spec.proxyAgent.replicas", int64(-2)), "spec.proxyAgent.replicas"),
		Entry("missing proxy-server image", withField(validMPC, "spec.proxyServer.image", nil), "spec.proxyServer.image"),
		Entry("a Service name that is not DNS-1035", withField(validMPC, "spec.proxyServer.inClusterServiceName", "1-bad"), "spec.proxyServer.inClusterServiceName"),
		Entry("an additionalServiceProxyArgs flag the service-proxy does not have",
			withField(validMPC, argsField, []any{"--allowed-service=default/web", "--proxy-server-host=evil.example.com"}),
			argsField+"[1]", notAFlag, allowedArgsHint),
		Entry("an additionalServiceProxyArgs flag and value as one space-separated entry",
			withField(validMPC, argsField, []any{"--service-domain svc.corp"}), argsField+"[0]", notAFlag, allowedArgsHint),
		Entry("an additionalServiceProxyArgs --allowed-service with a port above 65535",
			withField(validMPC, argsField, []any{"--allowed-service=default/web:99999"}), argsField+"[0]", notAFlag),
		Entry("an additionalServiceProxyArgs -v that is not a level", withField(validMPC, argsField, []any{"-v=high"}), argsField+"[0]", notAFlag),
		Entry("an additionalServiceProxyArgs --service-ca-file without a path", withField(validMPC, argsField, []any{"--service-ca-file="}), argsField+"[0]", notAFlag),
		Entry("--enable-impersonation=false in additionalServiceProxyArgs",
			withField(validMPC, argsField, []any{"--v=2", "--enable-impersonation=false"}), argsField+"[1]", impersonationHint),
		Entry("a bare --enable-impersonation in additionalServiceProxyArgs", withField(validMPC, argsField, []any{"--enable-impersonation"}), argsField+"[0]", impersonationHint),
		Entry("a single-dash -enable-impersonation in additionalServiceProxyArgs", withField(validMPC, argsField, []any{"-enable-impersonation=true"}), argsField+"[0]", impersonationHint),
		Entry("more than 32 additionalServiceProxyArgs", withField(validMPC, argsField, manyArgs(33)), argsField, "must have at most 32 items"),
		Entry("an additionalServiceCAConfigMap that is not a ConfigMap name",
			withField(validMPC, "spec.proxyAgent.additionalServiceCAConfigMap", "Service_CA"), "spec.proxyAgent.additionalServiceCAConfigMap", "should match"),
		Entry("an additionalServiceCAConfigMap longer than a ConfigMap name may be",
			withField(validMPC, "spec.proxyAgent.additionalServiceCAConfigMap", strings.Repeat("a", 254)), "spec.proxyAgent.additionalServiceCAConfigMap", "253"),
		Entry("proxy-server resources whose request exceeds the limit",
			withField(validMPC, "spec.proxyServer.resources", map[string]any{"requests": map[string]any{"memory": "2Gi"}, "limits": map[string]any{"memory": "1Gi"}}),
			"spec.proxyServer.resources", "a request may not exceed the limit"),
		Entry("agent resources whose request exceeds the limit, in other units",
			withField(validMPC, "spec.proxyAgent.resources", map[string]any{"requests": map[string]any{"cpu": "1.5"}, "limits": map[string]any{"cpu": "1200m"}}),
			"spec.proxyAgent.resources", "a request may not exceed the limit"),
		Entry("agent resources with claims, which the agent pods do not have",
			withField(validMPC, "spec.proxyAgent.resources", map[string]any{"claims": []any{map[string]any{"name": "gpu"}}}),
			"spec.proxyAgent.resources", "claims is not supported"),
		Entry("proxy-server resources with a quantity that is not one",
			withField(validMPC, "spec.proxyServer.resources", map[string]any{"requests": map[string]any{"cpu": "lots"}}), "spec.proxyServer.resources.requests.cpu"),
		Entry("audit without a sink", withField(validMPC, "spec.audit", map[string]any{"policyConfigMapName": "policy"}),
			"spec.audit", "audit needs a sink"),
		Entry("an audit webhook mode kube-apiserver does not have", withField(validMPC, "spec.audit",
			map[string]any{"webhook": map[string]any{"kubeconfigSecretName": "collector", "mode": "Async"}}), "spec.audit.webhook.mode", `"Async"`),
		Entry("an audit log rotated at 0 MiB", withField(validMPC, "spec.audit", map[string]any{"log": map[string]any{"maxSize": int64(0)}}),
			"spec.audit.log.maxSize"),
		Entry("session recording without its claim", withField(validMPC, "spec.sessionRecording", map[string]any{"onFailure": "Closed"}),
			"spec.sessionRecording.persistentVolumeClaimName"),
		Entry("a session recording failure policy that is neither Open nor Closed", withField(validMPC, "spec.sessionRecording",
			map[string]any{"persistentVolumeClaimName": "sessions", "onFailure": "Ignore"}), "spec.sessionRecording.onFailure"),
		Entry("renewBefore equal to duration", withField(validPC, "spec.renewBefore", "24h"), "renewBefore must be shorter than duration"),
		Entry("renewBefore longer than duration", withField(validPC, "spec.renewBefore", "48h"), "renewBefore must be shorter than duration"),
		Entry("a duration that is not a duration", withField(validPC, "spec.duration", "two days"), "spec.duration"),
		Entry("an unknown usage", withField(validPC, "spec.usages", []any{"code signing"}), "spec.usages", `"code signing"`),
		Entry("an IP SAN that is not an IP", withField(validPC, "spec.ipAddresses", []any{"300.1.1.1"}), "spec.ipAddresses", "must be IP addresses"),
		Entry("a certificate without issuer", withField(validPC, "spec.issuerRef", nil), "spec.issuerRef"),
	)

	It("refuses --enable-impersonation in additionalServiceProxyArgs with the customizedVariable hint alone", func() {
		err := k8s.Create(ctx(), withField(validMPC, argsField, []any{"--enable-impersonation=false"}))
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring(argsField + "[0]"))
		Expect(err.Error()).To(ContainSubstring("set the AddOnDeploymentConfig customizedVariable enableImpersonation (true or false) instead"))
		Expect(err.Error()).NotTo(ContainSubstring("takes only service-proxy flags"), "one message per entry: the hint, not the list of flags")
	})

	It("accepts every flag additionalServiceProxyArgs allows, and keeps them as written", func() {
		args := []any{
			"--allowed-service=monitoring/prometheus:9090", "--allowed-service=team/api", "--allowed-service=a/b:65535",
			"--service-domain=svc.cluster.local", "--service-domain=svc.cluster.local.",
			"--service-ca-file=/etc/other-ca/ca.crt", "-v=3", "--v=10",
		}
		obj := withField(validMPC, argsField, args)
		Expect(k8s.Create(ctx(), obj)).To(Succeed())
		DeferCleanupDelete(obj)
		mpc := &proxyv1alpha1.ManagedProxyConfiguration{}
		Expect(k8s.Get(ctx(), client.ObjectKey{Name: obj.GetName()}, mpc)).To(Succeed())
		Expect(mpc.Spec.ProxyAgent.AdditionalServiceProxyArgs).To(Equal([]string{
			"--allowed-service=monitoring/prometheus:9090", "--allowed-service=team/api", "--allowed-service=a/b:65535",
			"--service-domain=svc.cluster.local", "--service-domain=svc.cluster.local.",
			"--service-ca-file=/etc/other-ca/ca.crt", "-v=3", "--v=10",
		}))

		obj = withField(validMPC, argsField, manyArgs(32))
		Expect(k8s.Create(ctx(), obj)).To(Succeed(), "32 entries, the most the schema allows")
		DeferCleanupDelete(obj)
	})

	It("accepts the valid objects the table starts from", func() {
		for _, doc := range []string{validMPC, validPC} {
			obj := withField(doc, "metadata.labels", map[string]any{"test": "valid"})
			Expect(k8s.Create(ctx(), obj)).To(Succeed())
			DeferCleanupDelete(obj)
		}
	})

	It("applies the config/samples manifests, written as the existing addon's users write them, unchanged", func() {
		files, err := filepath.Glob(filepath.Join(repo.Root(), "config", "samples", "proxy_*.yaml"))
		Expect(err).NotTo(HaveOccurred())
		Expect(files).NotTo(BeEmpty())
		for _, f := range files {
			raw, err := os.ReadFile(f)
			Expect(err).NotTo(HaveOccurred())
			obj := &unstructured.Unstructured{}
			Expect(utilyaml.Unmarshal(raw, &obj.Object)).To(Succeed())
			if obj.GetNamespace() != "" {
				ns := &unstructured.Unstructured{}
				ns.SetAPIVersion("v1")
				ns.SetKind("Namespace")
				ns.SetName(obj.GetNamespace())
				Expect(client.IgnoreAlreadyExists(k8s.Create(ctx(), ns))).To(Succeed())
			}
			Expect(k8s.Create(ctx(), obj)).To(Succeed(), f)
			DeferCleanupDelete(obj)
		}
		mpc := &proxyv1alpha1.ManagedProxyConfiguration{}
		Expect(k8s.Get(ctx(), client.ObjectKey{Name: "cluster-proxy"}, mpc)).To(Succeed())
		Expect(mpc.Spec.ProxyServer.InClusterServiceName).To(Equal("proxy-entrypoint"), "defaults as in the existing addon")
		Expect(mpc.Spec.Authentication.Dump.Secrets.SigningProxyServerSecretName).To(Equal("proxy-server"))
		Expect(mpc.Spec.Deploy.Ports.AgentServer).To(Equal(int32(8091)))
		expectReady(mpc)
		Eventually(func(g Gomega) {
			pc := get(g, &proxyv1alpha1.ProxyCertificate{}, "open-cluster-management-addon", "my-tool-client")
			g.Expect(meta.IsStatusConditionTrue(pc.Status.Conditions, proxyv1alpha1.ConditionReady)).To(BeTrue())
		}, timeout, interval).Should(Succeed())
	})
})
