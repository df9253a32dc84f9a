package render

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
)

func TestNoRecordsRenderNoRecordFlagsOrVolumes(t *testing.T) {
	g := NewWithT(t)
	m := mpc(nil)
	g.Expect(ServerArgs(m)).NotTo(ContainElement(Or(HavePrefix("--audit-"), HavePrefix("--session-recording"))))
	d := ServerDeployment(m)
	g.Expect(d.Spec.Template.Spec.SecurityContext.FSGroup).To(BeNil())
	g.Expect(d.Spec.Template.Spec.Volumes).NotTo(ContainElement(HaveField("Name", HavePrefix("audit"))))
}

func TestAuditRendersKubeAPIServersFlagsAFilePerPodAndItsVolumes(t *testing.T) {
	g := NewWithT(t)
	m := mpc(nil)
	m.Spec.Audit = &proxyv1alpha1.ManagedProxyConfigurationAudit{
		PolicyConfigMapName: "audit-policy",
		Log:                 &proxyv1alpha1.AuditLog{PersistentVolumeClaimName: "records", MaxAge: 7, MaxBackups: 3, MaxSize: 50},
		Webhook:             &proxyv1alpha1.AuditWebhook{KubeconfigSecretName: "collector", Mode: proxyv1alpha1.AuditWebhookBlockingStrict},
	}
	g.Expect(ServerArgs(m)).To(ContainElements(
		"--audit-policy-file=/etc/cluster-proxy/audit-policy/policy.yaml",
		"--audit-log-path=/var/log/cluster-proxy/audit/$(POD_NAME).log",
		"--audit-log-maxage=7", "--audit-log-maxbackup=3", "--audit-log-maxsize=50",
		"--audit-webhook-config-file=/etc/cluster-proxy/audit-webhook/kubeconfig",
		"--audit-webhook-mode=blocking-strict"))
	pod := ServerDeployment(m).Spec.Template.Spec
	g.Expect(pod.Volumes).To(ContainElements(
		HaveField("ConfigMap.Name", "audit-policy"),
		HaveField("Secret.SecretName", "collector"),
		HaveField("PersistentVolumeClaim.ClaimName", "records")))
	c := pod.Containers[0]
	g.Expect(c.VolumeMounts).To(ContainElements(
		corev1.VolumeMount{Name: "audit-policy", MountPath: "/etc/cluster-proxy/audit-policy", ReadOnly: true},
		corev1.VolumeMount{Name: "audit-webhook", MountPath: "/etc/cluster-proxy/audit-webhook", ReadOnly: true},
		corev1.VolumeMount{Name: "audit-log", MountPath: "/var/log/cluster-proxy"}))
	g.Expect(c.Env).To(ContainElement(HaveField("ValueFrom.FieldRef.FieldPath", "metadata.name")), "$(POD_NAME) in the log path")
	g.Expect(*pod.SecurityContext.FSGroup).To(BeEquivalentTo(65532), "the image's user writes a fresh claim")

	m.Spec.Audit = &proxyv1alpha1.ManagedProxyConfigurationAudit{Log: &proxyv1alpha1.AuditLog{}}
	pod = ServerDeployment(m).Spec.Template.Spec
	g.Expect(pod.Volumes).To(ContainElement(And(HaveField("Name", "audit-log"), HaveField("EmptyDir", Not(BeNil())))))
	g.Expect(pod.SecurityContext.FSGroup).To(BeNil(), "an emptyDir is writable as it is")
	g.Expect(ServerArgs(m)).To(ContainElement("--audit-log-maxsize=1"), "never 0, which lumberjack reads as its 100 MiB")
	g.Expect(ServerArgs(m)).NotTo(ContainElement(HavePrefix("--audit-policy-file")), "no policy: Metadata for everything")
}

func TestSessionRecordingRendersItsClaimAndPolicy(t *testing.T) {
	g := NewWithT(t)
	m := mpc(nil)
	m.Spec.SessionRecording = &proxyv1alpha1.ManagedProxyConfigurationSessionRecording{PersistentVolumeClaimName: "sessions"}
	g.Expect(recordArgs(m)).To(Equal([]string{"--session-recording-dir=/var/lib/cluster-proxy/sessions"}))
	m.Spec.SessionRecording.RecordStdin = true
	m.Spec.SessionRecording.OnFailure = proxyv1alpha1.RecordingFailClosed
	g.Expect(recordArgs(m)).To(Equal([]string{"--session-recording-dir=/var/lib/cluster-proxy/sessions",
		"--session-recording-stdin", "--session-recording-fail-closed"}))
	pod := ServerDeployment(m).Spec.Template.Spec
	g.Expect(pod.Volumes).To(ContainElement(HaveField("PersistentVolumeClaim.ClaimName", "sessions")))
	g.Expect(pod.Containers[0].VolumeMounts).To(ContainElement(HaveField("MountPath", "/var/lib/cluster-proxy/sessions")))

}
