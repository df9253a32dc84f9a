package managedproxyconfiguration

import (
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/tunnelclient"
)

func TestRecordsWritableNamesTheReplicaAndTheSinkThatCannotWrite(t *testing.T) {
	audited := &proxyv1alpha1.ManagedProxyConfiguration{}
	audited.Spec.Audit = &proxyv1alpha1.ManagedProxyConfigurationAudit{Webhook: &proxyv1alpha1.AuditWebhook{KubeconfigSecretName: "w"}}
	audited.Spec.SessionRecording = &proxyv1alpha1.ManagedProxyConfigurationSessionRecording{PersistentVolumeClaimName: "s"}
	webhookDown := []tunnelclient.RecordSink{{Sink: "audit-webhook", Message: "dial tcp 10.0.0.9:443: connection refused"},
		{Sink: "session-recording", Up: true}}
	allUp := []tunnelclient.RecordSink{{Sink: "audit-webhook", Up: true}, {Sink: "session-recording", Up: true}}
	for _, tc := range []struct {
		name     string
		mpc      *proxyv1alpha1.ManagedProxyConfiguration
		records  map[string][]tunnelclient.RecordSink
		reported bool
		want     *metav1.Condition
	}{
		{name: "no records asked for: no condition", mpc: &proxyv1alpha1.ManagedProxyConfiguration{},
			records: map[string][]tunnelclient.RecordSink{"a": webhookDown}, reported: true},
		{name: "before the first round", mpc: audited, want: &metav1.Condition{Status: metav1.ConditionFalse,
			Reason: proxyv1alpha1.ReasonRecordSinksNotReported}},
		{name: "every replica writes", mpc: audited, reported: true, records: map[string][]tunnelclient.RecordSink{"a": allUp, "b": allUp},
			want: &metav1.Condition{Status: metav1.ConditionTrue, Reason: proxyv1alpha1.ReasonRecordSinksWritable,
				Message: "every proxy-server replica writes audit-webhook, session-recording"}},
		{name: "one replica cannot reach the webhook", mpc: audited, reported: true,
			records: map[string][]tunnelclient.RecordSink{"a": allUp, "b": webhookDown},
			want: &metav1.Condition{Status: metav1.ConditionFalse, Reason: proxyv1alpha1.ReasonRecordSinkDown,
				Message: "replica b: audit-webhook: dial tcp 10.0.0.9:443: connection refused"}},
		{name: "a sink the configuration no longer asks for is not its business", mpc: func() *proxyv1alpha1.ManagedProxyConfiguration {
			m := audited.DeepCopy()
			m.Spec.Audit = nil
			return m
		}(), reported: true, records: map[string][]tunnelclient.RecordSink{"old": webhookDown},
			want: &metav1.Condition{Status: metav1.ConditionTrue, Reason: proxyv1alpha1.ReasonRecordSinksWritable}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			status := &proxyv1alpha1.ManagedProxyConfigurationStatus{}
			setRecordsCondition(status, tc.mpc, tc.records, tc.reported)
			got := meta.FindStatusCondition(status.Conditions, proxyv1alpha1.ConditionRecordsWritable)
			if tc.want == nil {
				g.Expect(got).To(BeNil())
				return
			}
			g.Expect(got).NotTo(BeNil())
			g.Expect(got.Status).To(Equal(tc.want.Status))
			g.Expect(got.Reason).To(Equal(tc.want.Reason))
			g.Expect(got.Message).To(HavePrefix(tc.want.Message))
		})
	}
}
