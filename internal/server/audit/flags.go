package audit

import (
	"flag"
	"strings"
)

// AddFlags registers kube-apiserver's audit flags on fs, bound to o, with o's values as defaults (NewOptions has
// kube-apiserver's). The batch tuning flags (--audit-*-batch-*) are not among them: LogBatch and WebhookBatch.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	modes := strings.Join([]string{ModeBatch, ModeBlocking, ModeBlockingStrict}, ", ")
	fs.StringVar(&o.PolicyFile, "audit-policy-file", o.PolicyFile, "audit.k8s.io/v1 Policy deciding what the audit "+
		"events of requests to managed clusters record; empty: every request at Metadata level")
	fs.StringVar(&o.LogPath, "audit-log-path", o.LogPath, "file the audit events are appended to, one JSON "+
		"audit.k8s.io/v1 Event a line; '-' is standard output, empty writes no file")
	fs.IntVar(&o.LogMaxAge, "audit-log-maxage", o.LogMaxAge, "days rotated audit log files are kept; 0 keeps them whatever their age")
	fs.IntVar(&o.LogMaxBackups, "audit-log-maxbackup", o.LogMaxBackups, "rotated audit log files kept; 0 keeps every one")
	fs.IntVar(&o.LogMaxSize, "audit-log-maxsize", o.LogMaxSize, "MiB at which the audit log file is rotated; 0 never rotates it")
	fs.BoolVar(&o.LogCompress, "audit-log-compress", o.LogCompress, "gzip rotated audit log files")
	fs.StringVar(&o.LogMode, "audit-log-mode", o.LogMode, "how audit events are written to the file: "+modes)
	fs.StringVar(&o.WebhookKubeconfig, "audit-webhook-config-file", o.WebhookKubeconfig, "kubeconfig naming the "+
		"server audit events are POSTed to as audit.k8s.io/v1 EventLists; empty sends none")
	fs.StringVar(&o.WebhookMode, "audit-webhook-mode", o.WebhookMode, "how audit events are sent to the webhook: "+modes)
	fs.DurationVar(&o.WebhookInitialBackoff, "audit-webhook-initial-backoff", o.WebhookInitialBackoff,
		"wait before retrying a failed POST to the audit webhook")
}
