package v1alpha1

// ManagedProxyConfigurationAudit configures the proxy-servers' audit events.
// +kubebuilder:validation:XValidation:rule="has(self.log) || has(self.webhook)",message="audit needs a sink: set log, webhook or both"
type ManagedProxyConfigurationAudit struct {
	// policyConfigMapName names a ConfigMap in proxyServer.namespace whose key policy.yaml is an audit.k8s.io/v1
	// Policy, the format of kube-apiserver's --audit-policy-file: its rules match the hub user and the request to the
	// managed cluster (verb, resources, namespaces, non-resource URLs) and set its level. Unset: every request at the
	// Metadata level.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	PolicyConfigMapName string `json:"policyConfigMapName,omitempty"`
	// log writes the events as JSON lines to a file per proxy-server pod, rotated as kube-apiserver's --audit-log-*.
	// +optional
	Log *AuditLog `json:"log,omitempty"`
	// webhook sends the events in batches (audit.k8s.io/v1 EventList) to a receiver, as kube-apiserver's
	// --audit-webhook-*.
	// +optional
	Webhook *AuditWebhook `json:"webhook,omitempty"`
}

// AuditLog is the file sink of audit events.
type AuditLog struct {
	// persistentVolumeClaimName names a PersistentVolumeClaim in proxyServer.namespace the files are written to,
	// audit/<pod name>.log. With more than one proxy-server replica it must be ReadWriteMany, or its pods must share a
	// node. Unset: an emptyDir, which keeps the files while the pod lives.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	PersistentVolumeClaimName string `json:"persistentVolumeClaimName,omitempty"`
	// maxAge is how many days rotated files are kept; 0 keeps them by age.
	// +optional
	// +kubebuilder:validation:Minimum=0
	MaxAge int32 `json:"maxAge,omitempty"`
	// maxBackups is how many rotated files are kept; 0 keeps them all.
	// +optional
	// +kubebuilder:validation:Minimum=0
	MaxBackups int32 `json:"maxBackups,omitempty"`
	// maxSize is the size in MiB at which the file is rotated.
	// +optional
	// +kubebuilder:default=100
	// +kubebuilder:validation:Minimum=1
	MaxSize int32 `json:"maxSize,omitempty"`
}

// AuditWebhookMode is how events reach the webhook, as kube-apiserver's --audit-webhook-mode.
// +kubebuilder:validation:Enum=Batch;Blocking;BlockingStrict
type AuditWebhookMode string

const (
	// AuditWebhookBatch buffers events and sends them asynchronously in batches; a full buffer drops events, counted.
	AuditWebhookBatch AuditWebhookMode = "Batch"
	// AuditWebhookBlocking sends each request's event before the request ends.
	AuditWebhookBlocking AuditWebhookMode = "Blocking"
	// AuditWebhookBlockingStrict is Blocking, and refuses requests while the webhook cannot take events.
	AuditWebhookBlockingStrict AuditWebhookMode = "BlockingStrict"
)

// AuditWebhook is the webhook sink of audit events.
type AuditWebhook struct {
	// kubeconfigSecretName names a Secret in proxyServer.namespace whose key kubeconfig is the receiver, in the
	// format of kube-apiserver's --audit-webhook-config-file (cluster server and CA, client credentials).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	KubeconfigSecretName string `json:"kubeconfigSecretName"`
	// mode is Batch (default), Blocking or BlockingStrict.
	// +optional
	// +kubebuilder:default=Batch
	Mode AuditWebhookMode `json:"mode,omitempty"`
}

// RecordingFailurePolicy says what happens to a session that cannot be recorded.
// +kubebuilder:validation:Enum=Open;Closed
type RecordingFailurePolicy string

const (
	// RecordingFailOpen lets the session go on unrecorded; it is logged and counted.
	RecordingFailOpen RecordingFailurePolicy = "Open"
	// RecordingFailClosed refuses a session that cannot be recorded, and ends one whose recording fails.
	RecordingFailClosed RecordingFailurePolicy = "Closed"
)

// ManagedProxyConfigurationSessionRecording configures the recording of exec and attach sessions.
type ManagedProxyConfigurationSessionRecording struct {
	// persistentVolumeClaimName names the PersistentVolumeClaim in proxyServer.namespace the recordings are written
	// to, <cluster>/<date>/<session>.cast. With more than one proxy-server replica it must be ReadWriteMany, or its
	// pods must share a node.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	PersistentVolumeClaimName string `json:"persistentVolumeClaimName"`
	// recordStdin records what the user types too; off, only the output (stdout, stderr) and terminal resizes.
	// +optional
	RecordStdin bool `json:"recordStdin,omitempty"`
	// onFailure is Open (default: a session that cannot be recorded goes on, logged and counted) or Closed (it is
	// refused, or ended when its recording fails midway).
	// +optional
	// +kubebuilder:default=Open
	OnFailure RecordingFailurePolicy `json:"onFailure,omitempty"`
}
