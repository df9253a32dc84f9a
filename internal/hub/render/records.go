package render

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
)

// What the proxy-server reads and writes its records with: the audit policy and webhook configuration, the audit
// files and the session recordings.
const (
	AuditPolicyKey          = "policy.yaml"
	AuditWebhookKey         = "kubeconfig"
	auditPolicyMount        = "/etc/cluster-proxy/audit-policy"
	auditWebhookMount       = "/etc/cluster-proxy/audit-webhook"
	auditLogMount           = "/var/log/cluster-proxy"
	sessionRecordingsMount  = "/var/lib/cluster-proxy/sessions"
	podNameEnv              = "POD_NAME"
	auditPolicyVolume       = "audit-policy"
	auditWebhookVolume      = "audit-webhook"
	auditLogVolume          = "audit-log"
	sessionRecordingsVolume = "session-recordings"
	// imageUser is the user and group the image runs as (Dockerfile): the group that owns what it writes on volumes.
	imageUser = 65532
)

// auditWebhookModes are the proxy-server's --audit-webhook-mode values, kube-apiserver's.
var auditWebhookModes = map[proxyv1alpha1.AuditWebhookMode]string{
	proxyv1alpha1.AuditWebhookBatch:          "batch",
	proxyv1alpha1.AuditWebhookBlocking:       "blocking",
	proxyv1alpha1.AuditWebhookBlockingStrict: "blocking-strict",
}

// recordArgs are the proxy-server flags of spec.audit and spec.sessionRecording.
func recordArgs(mpc *proxyv1alpha1.ManagedProxyConfiguration) []string {
	var args []string
	if a := mpc.Spec.Audit; a != nil {
		if a.PolicyConfigMapName != "" {
			args = append(args, "--audit-policy-file="+auditPolicyMount+"/"+AuditPolicyKey)
		}
		if l := a.Log; l != nil {
			// One file per pod: replicas sharing a volume never write the same file.
			args = append(args, "--audit-log-path="+auditLogMount+"/audit/$("+podNameEnv+").log",
				"--audit-log-maxage="+strconv.Itoa(int(l.MaxAge)),
				"--audit-log-maxbackup="+strconv.Itoa(int(l.MaxBackups)),
				"--audit-log-maxsize="+strconv.Itoa(int(max(l.MaxSize, 1))))
		}
		if w := a.Webhook; w != nil {
			mode := auditWebhookModes[w.Mode]
			if mode == "" {
				mode = auditWebhookModes[proxyv1alpha1.AuditWebhookBatch]
			}
			args = append(args, "--audit-webhook-config-file="+auditWebhookMount+"/"+AuditWebhookKey, "--audit-webhook-mode="+mode)
		}
	}
	if r := mpc.Spec.SessionRecording; r != nil {
		args = append(args, "--session-recording-dir="+sessionRecordingsMount)
		if r.RecordStdin {
			args = append(args, "--session-recording-stdin")
		}
		if r.OnFailure == proxyv1alpha1.RecordingFailClosed {
			args = append(args, "--session-recording-fail-closed")
		}
	}
	return args
}

// recordVolumes adds to the proxy-server's pod what recordArgs names.
func recordVolumes(mpc *proxyv1alpha1.ManagedProxyConfiguration, pod *corev1.PodSpec) {
	a, r := mpc.Spec.Audit, mpc.Spec.SessionRecording
	if a == nil && r == nil {
		return
	}
	c := &pod.Containers[0]
	claims := false
	if a != nil && a.PolicyConfigMapName != "" {
		pod.Volumes = append(pod.Volumes, corev1.Volume{Name: auditPolicyVolume, VolumeSource: corev1.VolumeSource{
			ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: a.PolicyConfigMapName}}}})
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: auditPolicyVolume, MountPath: auditPolicyMount, ReadOnly: true})
	}
	if a != nil && a.Webhook != nil {
		pod.Volumes = append(pod.Volumes, secretVolume(auditWebhookVolume, a.Webhook.KubeconfigSecretName))
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: auditWebhookVolume, MountPath: auditWebhookMount, ReadOnly: true})
	}
	if a != nil && a.Log != nil {
		source := corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}
		if claim := a.Log.PersistentVolumeClaimName; claim != "" {
			source = corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}
			claims = true
		}
		pod.Volumes = append(pod.Volumes, corev1.Volume{Name: auditLogVolume, VolumeSource: source})
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: auditLogVolume, MountPath: auditLogMount})
		c.Env = append(c.Env, corev1.EnvVar{Name: podNameEnv, ValueFrom: &corev1.EnvVarSource{
			FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.name"}}})
	}
	if r != nil {
		pod.Volumes = append(pod.Volumes, corev1.Volume{Name: sessionRecordingsVolume, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: r.PersistentVolumeClaimName}}})
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: sessionRecordingsVolume, MountPath: sessionRecordingsMount})
		claims = true
	}
	if claims {
		// A fresh volume is root's: the group makes it the image user's to write, where the volume's driver supports it.
		pod.SecurityContext.FSGroup = ptr.To[int64](imageUser)
		pod.SecurityContext.FSGroupChangePolicy = ptr.To(corev1.FSGroupChangeOnRootMismatch)
	}
}
