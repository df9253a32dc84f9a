package managedproxyconfiguration

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	ctrl "sigs.k8s.io/controller-runtime"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/tunnelclient"
)

// RecordSource tells what the proxy-server replicas of the default configuration report of their record sinks
// (*tunnelhealth.Source).
type RecordSource interface {
	// Records are the sinks by replica, as the last round found them; false before a round.
	Records() (map[string][]tunnelclient.RecordSink, bool)
}

// reconcileRecords reports whether the proxy-servers can write the records spec.audit and spec.sessionRecording ask
// for.
func (r *Reconciler) reconcileRecords(_ context.Context, s *scope) (ctrl.Result, error) {
	if r.Records == nil || s.mpc.Name != proxyv1alpha1.DefaultConfigurationName {
		return ctrl.Result{}, nil // no one asks this configuration's proxy-servers
	}
	records, reported := r.Records.Records()
	setRecordsCondition(s.status, s.mpc, records, reported)
	return ctrl.Result{}, nil
}

// expectedSinks are the sinks the configuration asks every proxy-server replica for.
func expectedSinks(mpc *proxyv1alpha1.ManagedProxyConfiguration) []string {
	var out []string
	if a := mpc.Spec.Audit; a != nil {
		if a.Log != nil {
			out = append(out, tunnelclient.RecordSinkAuditLog)
		}
		if a.Webhook != nil {
			out = append(out, tunnelclient.RecordSinkAuditWebhook)
		}
	}
	if mpc.Spec.SessionRecording != nil {
		out = append(out, tunnelclient.RecordSinkSessionRecording)
	}
	return out
}

// setRecordsCondition sets RecordsWritable from the replicas' sinks: False while a replica's sink that the
// configuration asks for cannot be written, naming the replica, the sink and what failed. A configuration that asks
// for no records has no such condition.
func setRecordsCondition(status *proxyv1alpha1.ManagedProxyConfigurationStatus, mpc *proxyv1alpha1.ManagedProxyConfiguration,
	records map[string][]tunnelclient.RecordSink, reported bool) {
	expected := expectedSinks(mpc)
	if len(expected) == 0 {
		meta.RemoveStatusCondition(&status.Conditions, proxyv1alpha1.ConditionRecordsWritable)
		return
	}
	if !reported {
		setCondition(status, mpc.Generation, proxyv1alpha1.ConditionRecordsWritable, false, proxyv1alpha1.ReasonRecordSinksNotReported,
			"the proxy-servers have not reported their record sinks yet")
		return
	}
	var down []string
	for _, replica := range slices.Sorted(maps.Keys(records)) {
		for _, sink := range records[replica] {
			if !sink.Up && slices.Contains(expected, sink.Sink) {
				down = append(down, fmt.Sprintf("replica %s: %s: %s", replica, sink.Sink, sink.Message))
			}
		}
	}
	if len(down) > 0 {
		setCondition(status, mpc.Generation, proxyv1alpha1.ConditionRecordsWritable, false, proxyv1alpha1.ReasonRecordSinkDown,
			strings.Join(down, "; ")+" (the proxy-servers' cluster_proxy_audit_sink_up and cluster_proxy_session_recording_sink_up "+
				"metrics say since when; docs/audit.md says what to check)")
		return
	}
	setCondition(status, mpc.Generation, proxyv1alpha1.ConditionRecordsWritable, true, proxyv1alpha1.ReasonRecordSinksWritable,
		fmt.Sprintf("every proxy-server replica writes %s", strings.Join(expected, ", ")))
}
