package launcher

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/render"
)

func testMPC() *proxyv1alpha1.ManagedProxyConfiguration {
	return &proxyv1alpha1.ManagedProxyConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "cluster-proxy", UID: "uid"},
		Spec: proxyv1alpha1.ManagedProxyConfigurationSpec{
			ProxyServer: proxyv1alpha1.ManagedProxyConfigurationProxyServer{Image: "proxy:test", Replicas: 1, Namespace: "open-cluster-management-addon"},
			ProxyAgent:  proxyv1alpha1.ManagedProxyConfigurationProxyAgent{Image: "proxy:test", Replicas: 1},
			UserServer:  &proxyv1alpha1.ManagedProxyConfigurationUserServer{AllowedServices: []proxyv1alpha1.AllowedService{{Namespace: "default", Name: "web"}}},
		},
	}
}

// renderedAgentDeployment is the agent Deployment of render.AgentWork's manifests.
func renderedAgentDeployment(t *testing.T, mpc *proxyv1alpha1.ManagedProxyConfiguration, adc *addonv1alpha1.AddOnDeploymentConfig) *appsv1.Deployment {
	t.Helper()
	work, _, err := render.AgentWork(render.AgentInput{Cluster: "1st", MPC: mpc, ADC: adc, EntrypointHost: "proxy-entrypoint.open-cluster-management-addon.svc", CABundle: []byte("ca")})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range work.Spec.Workload.Manifests {
		u := &unstructured.Unstructured{}
		if err := json.Unmarshal(m.Raw, &u.Object); err != nil {
			t.Fatal(err)
		}
		if u.GetKind() == "Deployment" {
			d := &appsv1.Deployment{}
			if err := json.Unmarshal(m.Raw, d); err != nil {
				t.Fatal(err)
			}
			return d
		}
	}
	t.Fatal("no Deployment in the agent manifests")
	return nil
}

func testContext() podContext {
	return podContext{
		Name: "pod-0", Namespace: "ns", Dir: "/work/pod", APIServer: "127.0.0.1:6443",
		Binaries: Binaries{ProxyServer: "/bin/ps", ProxyAgent: "/bin/pa"},
		Secret:   func(string) (*corev1.Secret, bool) { return nil, false },
		Port:     func(p int32) (int32, error) { return p, nil },
	}
}

func TestServerCommandLineIsTheRenderedOneWithFilesAndLoopback(t *testing.T) {
	g := NewWithT(t)
	mpc := testMPC()
	d := render.ServerDeployment(mpc)
	pc := testContext()
	pc.Name = "cluster-proxy-0"
	pc.Addresses = map[string]string{"proxy-entrypoint.open-cluster-management-addon.svc:8091": "127.0.0.1:8091"}

	cl, err := buildCommandLine(&d.Spec.Template, pc)
	g.Expect(err).NotTo(HaveOccurred())

	var want []string
	for _, a := range render.ServerArgs(mpc) {
		want = append(want, strings.Replace(a, "=/etc/", "=/work/pod/etc/", 1))
	}
	want = append(want, "--bind-address=127.0.0.1", "--server-id=cluster-proxy-0")
	g.Expect(cl.Path).To(Equal("/bin/ps"))
	g.Expect(cl.Args).To(Equal(want), "the server takes no --resolve and has no token")
	g.Expect(cl.Args).To(ContainElement("--server-cert=/work/pod/etc/server-pki/tls.crt"))
	g.Expect(cl.Env).To(Equal([]string{"KUBERNETES_SERVICE_HOST=127.0.0.1", "KUBERNETES_SERVICE_PORT=6443", "HOSTNAME=cluster-proxy-0"}))
	g.Expect(cl.Ports).To(BeEmpty())
}

func TestAgentCommandLineAddsWhatAPodGetsAndNothingElse(t *testing.T) {
	g := NewWithT(t)
	adc := &addonv1alpha1.AddOnDeploymentConfig{Spec: addonv1alpha1.AddOnDeploymentConfigSpec{
		ProxyConfig: addonv1alpha1.ProxyConfig{HTTPSProxy: "http://squid.example:3128", NoProxy: "internal.example"},
	}}
	d := renderedAgentDeployment(t, testMPC(), adc)
	pc := testContext()
	pc.Name, pc.Namespace = "cluster-proxy-proxy-agent-0", render.DefaultAgentNamespace
	pc.Kubeconfig = "/work/pod/in-cluster.kubeconfig"
	pc.Addresses = map[string]string{
		"proxy-entrypoint.open-cluster-management-addon.svc:8091": "127.0.0.1:18091",
		"squid.example:3128": "127.0.0.1:13128",
	}
	pc.Port = func(p int32) (int32, error) { return 40001, nil } // 8093 is taken

	cl, err := buildCommandLine(&d.Spec.Template, pc)
	g.Expect(err).NotTo(HaveOccurred())

	rendered := d.Spec.Template.Spec.Containers[0].Args
	g.Expect(cl.Args[:len(rendered)]).To(Equal(mapAll(rendered, map[string]string{
		"--ca-cert=/etc/ca/ca.crt":             "--ca-cert=/work/pod/etc/ca/ca.crt",
		"--agent-cert=/etc/tls/tls.crt":        "--agent-cert=/work/pod/etc/tls/tls.crt",
		"--agent-key=/etc/tls/tls.key":         "--agent-key=/work/pod/etc/tls/tls.key",
		"--hub-kubeconfig=/etc/hub/kubeconfig": "--hub-kubeconfig=/work/pod/etc/hub/kubeconfig",
		"--health-server-port=8093":            "--health-server-port=40001",
	})), "rendered arguments keep their order; only files and the taken port change")
	g.Expect(cl.Args[len(rendered):]).To(Equal([]string{
		"--health-bind-address=127.0.0.1",
		"--agent-id=cluster-proxy-proxy-agent-0",
		"--kubeconfig=/work/pod/in-cluster.kubeconfig",
		"--resolve=proxy-entrypoint.open-cluster-management-addon.svc:8091=127.0.0.1:18091",
		"--resolve=squid.example:3128=127.0.0.1:13128",
	}))
	g.Expect(cl.Ports).To(Equal(map[int32]int32{8093: 40001}))

	env := map[string]string{}
	for _, e := range cl.Env {
		k, v, _ := strings.Cut(e, "=")
		env[k] = v
	}
	g.Expect(env).To(HaveKeyWithValue("HTTPS_PROXY", "http://squid.example:3128"))
	g.Expect(env["NO_PROXY"]).To(HaveSuffix(",127.0.0.1"), "$(KUBERNETES_SERVICE_HOST) is expanded as the kubelet does")
	g.Expect(env["NO_PROXY"]).NotTo(ContainSubstring("$("))
	g.Expect(env).To(HaveKeyWithValue("KUBERNETES_SERVICE_HOST", "127.0.0.1"))
	g.Expect(env).To(HaveKeyWithValue("KUBERNETES_SERVICE_PORT", "6443"))
	g.Expect(env).To(HaveKeyWithValue("HOSTNAME", "cluster-proxy-proxy-agent-0"))
	g.Expect(env).To(HaveLen(7), "HTTPS_PROXY, NO_PROXY in both cases, and the three a pod gets: nothing else")
}

func TestAgentWithAServiceCAConfigMapReadsItsFileFromThePodFolder(t *testing.T) {
	g := NewWithT(t)
	mpc := testMPC()
	mpc.Spec.ProxyAgent.AdditionalServiceCAConfigMap = "service-ca-bundle"
	d := renderedAgentDeployment(t, mpc, nil)
	g.Expect(d.Spec.Template.Spec.Volumes).To(ContainElement(HaveField("ConfigMap", Not(BeNil()))), "render mounts the ConfigMap")

	cl, err := buildCommandLine(&d.Spec.Template, testContext())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cl.Args).To(ContainElement("--service-ca-file=/work/pod" + render.ServiceCAMount + "/" + render.ServiceCAKey))
}

func mapAll(args []string, m map[string]string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if r, ok := m[a]; ok {
			a = r
		}
		out[i] = a
	}
	return out
}

func TestRenderedFlagsWinOverTheLaunchersOwn(t *testing.T) {
	g := NewWithT(t)
	mpc := testMPC()
	mpc.Spec.ProxyAgent.AdditionalArgs = []string{"--agent-id=mine", "--resolve=proxy-entrypoint.open-cluster-management-addon.svc:8091=10.0.0.1:8091", "--health-bind-address=0.0.0.0"}
	d := renderedAgentDeployment(t, mpc, nil)
	pc := testContext()
	pc.Addresses = map[string]string{"proxy-entrypoint.open-cluster-management-addon.svc:8091": "127.0.0.1:18091"}

	cl, err := buildCommandLine(&d.Spec.Template, pc)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(flagValues(cl.Args, "--agent-id")).To(Equal([]string{"mine"}))
	g.Expect(flagValues(cl.Args, "--resolve")).To(Equal([]string{"proxy-entrypoint.open-cluster-management-addon.svc:8091=10.0.0.1:8091"}))
	g.Expect(flagValues(cl.Args, "--health-bind-address")).To(Equal([]string{"0.0.0.0"}))
	g.Expect(hasFlag(cl.Args, "--kubeconfig")).To(BeFalse(), "no token is mounted, so no in-cluster configuration stands in")
}

func TestExpandFollowsTheKubelet(t *testing.T) {
	vars := map[string]string{"A": "a", "EMPTY": ""}
	for _, tc := range []struct{ in, want string }{
		{"$(A)", "a"},
		{"x$(A)y$(A)", "xaya"},
		{"$$(A)", "$(A)"},
		{"$$", "$"},
		{"$(UNKNOWN)", "$(UNKNOWN)"},
		{"$(EMPTY)-", "-"},
		{"$(A", "$(A"},
		{"a$b", "a$b"},
		{"end$", "end$"},
		{"http://u:p$$w@h", "http://u:p$w@h"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			NewWithT(t).Expect(expand(tc.in, mappingFor(vars))).To(Equal(tc.want))
		})
	}
}

func TestEnvIsBuiltInOrderWithValueFrom(t *testing.T) {
	g := NewWithT(t)
	tmpl := &corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "x"}},
		Spec: corev1.PodSpec{ServiceAccountName: "sa", Containers: []corev1.Container{{Name: "c", Command: []string{"/proxy-agent"},
			Args: []string{"--cluster-name=$(CLUSTER)", "--lease-namespace=$(POD_NAMESPACE)"},
			Env: []corev1.EnvVar{
				{Name: "LATER", Value: "$(CLUSTER)"}, // defined after: not expanded
				{Name: "CLUSTER", Value: "c1"},
				{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
				{Name: "APP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels['app']"}}},
				{Name: "SA", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.serviceAccountName"}}},
				{Name: "API", Value: "$(KUBERNETES_SERVICE_HOST):$(KUBERNETES_SERVICE_PORT)"},
				{Name: "PASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
					LocalObjectReference: corev1.LocalObjectReference{Name: "s"}, Key: "k"}}},
				{Name: "GONE", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
					LocalObjectReference: corev1.LocalObjectReference{Name: "missing"}, Key: "k", Optional: ptr.To(true)}}},
			}}}},
	}
	pc := testContext()
	pc.Secret = func(name string) (*corev1.Secret, bool) {
		if name == "s" {
			return &corev1.Secret{Data: map[string][]byte{"k": []byte("v")}}, true
		}
		return nil, false
	}
	cl, err := buildCommandLine(tmpl, pc)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cl.Env).To(Equal([]string{
		"LATER=$(CLUSTER)", "CLUSTER=c1", "POD_NAMESPACE=ns", "APP=x", "SA=sa", "API=127.0.0.1:6443", "PASSWORD=v",
		"KUBERNETES_SERVICE_HOST=127.0.0.1", "KUBERNETES_SERVICE_PORT=6443", "HOSTNAME=pod-0",
	}))
	g.Expect(cl.Args[:2]).To(Equal([]string{"--cluster-name=c1", "--lease-namespace=ns"}), "args are expanded against the final env")

	tmpl.Spec.Containers[0].Env[6].ValueFrom.SecretKeyRef.Name = "missing"
	_, err = buildCommandLine(tmpl, pc)
	var missing *missingError
	g.Expect(errors.As(err, &missing)).To(BeTrue(), "a missing Secret is waited for: %v", err)
}

func TestUnsupportedTemplatesAreRefused(t *testing.T) {
	base := func() *corev1.PodTemplateSpec {
		return &corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "c", Command: []string{"/proxy-agent"},
				VolumeMounts: []corev1.VolumeMount{{Name: "v", MountPath: "/etc/v"}}}},
			Volumes: []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "s"}}}},
		}}
	}
	for name, change := range map[string]func(*corev1.PodTemplateSpec){
		"two containers":  func(p *corev1.PodTemplateSpec) { p.Spec.Containers = append(p.Spec.Containers, p.Spec.Containers[0]) },
		"init container":  func(p *corev1.PodTemplateSpec) { p.Spec.InitContainers = p.Spec.Containers },
		"no command":      func(p *corev1.PodTemplateSpec) { p.Spec.Containers[0].Command = nil },
		"unknown program": func(p *corev1.PodTemplateSpec) { p.Spec.Containers[0].Command = []string{"/manager"} },
		"hostPath volume": func(p *corev1.PodTemplateSpec) {
			p.Spec.Volumes[0].VolumeSource = corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/etc"}}
		},
		"projected volume": func(p *corev1.PodTemplateSpec) {
			p.Spec.Volumes[0].VolumeSource = corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{}}
		},
		"subPath": func(p *corev1.PodTemplateSpec) { p.Spec.Containers[0].VolumeMounts[0].SubPath = "x" },
		"envFrom": func(p *corev1.PodTemplateSpec) { p.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{}} },
		"resourceFieldRef": func(p *corev1.PodTemplateSpec) {
			p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "X", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{}}}}
		},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			tmpl := base()
			_, err := buildCommandLine(tmpl, testContext())
			g.Expect(err).NotTo(HaveOccurred())
			change(tmpl)
			_, err = buildCommandLine(tmpl, testContext())
			var u *unsupportedError
			g.Expect(errors.As(err, &u)).To(BeTrue(), fmt.Sprint(err))
		})
	}
}

func TestMountPathsMapOnlyPathsUnderAMount(t *testing.T) {
	mounts := []mount{{path: "/etc/tls/extra", local: "/w/etc/tls/extra"}, {path: "/etc/tls", local: "/w/etc/tls"}}
	for _, tc := range []struct{ in, want string }{
		{"--cert=/etc/tls/tls.crt", "--cert=/w/etc/tls/tls.crt"},
		{"--cert=/etc/tls/extra/x", "--cert=/w/etc/tls/extra/x"},
		{"/etc/tls/tls.crt", "/w/etc/tls/tls.crt"},
		{"--dir=/etc/tls", "--dir=/w/etc/tls"},
		{"--cert=/etc/tlsx/tls.crt", "--cert=/etc/tlsx/tls.crt"},
		{"--flag", "--flag"},
		{"--name=etc/tls", "--name=etc/tls"},
	} {
		NewWithT(t).Expect(mapArg(tc.in, mounts)).To(Equal(tc.want), tc.in)
	}
}
