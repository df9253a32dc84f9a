package main

import (
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
)

// managerJob selects the manager's series among those of other controller-runtime programs the hub's Prometheus
// scrapes (controller_runtime_*, workqueue_*, leader_election_* are the same names in every operator). The chart's
// ServiceMonitor sets no jobLabel, so the prometheus-operator names the job after the manager's metrics Service.
// The cluster_proxy_* names are the operator's own and need no such selector.
const managerJob = `job="cluster-proxy-addon-manager-metrics"`

// fleetDashboard is "Cluster proxy / Fleet": every managed cluster at once, from the series of the manager (the
// clusters' state, certificates, its own work) and of the proxy-servers (agents held, requests, refusals).
func fleetDashboard() (dashboard.Dashboard, error) {
	return dashboard.NewDashboardBuilder("Cluster proxy / Fleet").
		Uid("cluster-proxy-fleet").
		Description("The managed clusters' tunnels, requests and certificates, and the manager's work, from the series of the hub's manager and proxy-servers.").
		Tags([]string{"cluster-proxy"}).
		Time("now-6h", "now").
		Refresh("1m").
		Timezone(common.TimeZoneBrowser).
		Tooltip(dashboard.DashboardCursorSyncCrosshair).
		WithVariable(datasourceVariable()).
		// Clusters: how many have the agent, how many reach the hub, which do not work.
		WithRow(dashboard.NewRowBuilder("Clusters")).
		WithPanel(statPanel().
			Title("Clusters installed").
			Description("Managed clusters whose agent is installed, over every ManagedProxyConfiguration.").
			Targets(targets(query(`sum(cluster_proxy_configuration_clusters{state="installed"})`, "installed"))).
			Span(6).Height(4)).
		WithPanel(statPanel().
			Title("Clusters connected").
			Description("Managed clusters whose agent is connected to the proxy-servers.").
			Targets(targets(query(`sum(cluster_proxy_configuration_clusters{state="connected"})`, "connected"))).
			Span(6).Height(4)).
		WithPanel(statPanel().
			Title("Clusters not Available").
			Description("Managed clusters whose condition Available is False or Unknown.").
			Targets(targets(query(`sum(cluster_proxy_cluster_status_condition{condition="Available",status!="True"})`, "not Available"))).
			Thresholds(thresholds("green", step(1, "red"))).
			ColorMode(common.BigValueColorModeBackground).
			Span(6).Height(4)).
		WithPanel(statPanel().
			Title("Tunnels unhealthy").
			Description("Managed clusters whose condition TunnelHealthy is False: the hub cannot reach their kube-apiserver through the tunnel.").
			Targets(targets(query(`sum(cluster_proxy_cluster_status_condition{condition="TunnelHealthy",status="False"})`, "TunnelHealthy False"))).
			Thresholds(thresholds("green", step(1, "red"))).
			ColorMode(common.BigValueColorModeBackground).
			Span(6).Height(4)).
		WithPanel(timeseriesPanel().
			Title("Clusters installed vs connected").
			Description("Managed clusters of each ManagedProxyConfiguration with the agent installed, and connected to the proxy-servers. A gap between the two is clusters whose agent cannot reach the hub.").
			Targets(targets(query(`sum by (configuration, state) (cluster_proxy_configuration_clusters)`, "{{configuration}} {{state}}"))).
			Min(0).Decimals(0).
			Span(12).Height(8)).
		WithPanel(timeseriesPanel().
			Title("Clusters by condition status").
			Description("Managed clusters whose condition is False or Unknown, by condition (True, the usual state, is left out so that the few stand out).").
			Targets(targets(query(`sum by (condition, status) (cluster_proxy_cluster_status_condition{status!="True"})`, "{{condition}} {{status}}"))).
			Min(0).Decimals(0).
			Span(12).Height(8)).
		WithPanel(tablePanel().
			Title("Clusters not Available: conditions not True").
			Description("Each managed cluster whose condition Available is not True, with every one of its conditions that is not True (False or Unknown): the first of AgentDeployed, AgentConnected, TunnelHealthy, ProxySettingsApplied, CertificateReady that fails is usually the cause. The cluster dashboard shows one cluster in detail.").
			Targets(targets(tableQuery(`max by (cluster, condition, status) (cluster_proxy_cluster_status_condition{status!="True"} == 1) and on (cluster) (cluster_proxy_cluster_status_condition{condition="Available",status!="True"} == 1)`))).
			WithTransformation(hideTableColumns()).
			Span(24).Height(8)).
		// Proxy-servers: whether the manager reaches every replica, and how the agents spread over them.
		WithRow(dashboard.NewRowBuilder("Proxy-servers")).
		WithPanel(statPanel().
			Title("Proxy-servers answering").
			Description("Proxy-server replicas that answered the manager's last tunnel health round.").
			Targets(targets(query(`max(cluster_proxy_tunnel_health_proxy_servers)`, "answering"))).
			Span(6).Height(4)).
		WithPanel(statPanel().
			Title("Proxy-servers scraped").
			Description("Proxy-server replicas this Prometheus scrapes (the chart's PodMonitor). Fewer than answering means some are not scraped; more means some do not answer the manager.").
			Targets(targets(query(`count(cluster_proxy_server_agent_streams)`, "scraped"))).
			Span(6).Height(4)).
		WithPanel(statPanel().
			Title("Tunnel health round").
			Description("Whether the manager's last round could ask the proxy-servers for their tunnel reports. While it cannot, the clusters' tunnel conditions are not updated.").
			Targets(targets(query(`min(cluster_proxy_tunnel_health_proxy_server_up)`, "round"))).
			Mappings(valueText(map[string]dashboard.ValueMappingResult{
				"1": result("up", "green"),
				"0": result("failing", "red"),
			})).
			ColorMode(common.BigValueColorModeBackground).
			Span(6).Height(4)).
		WithPanel(statPanel().
			Title("Clusters with agents").
			Description("The most clusters any proxy-server replica holds at least one agent of. Every replica should hold every connected cluster.").
			Targets(targets(query(`max(cluster_proxy_connected_clusters)`, "clusters"))).
			Span(6).Height(4)).
		WithPanel(timeseriesPanel().
			Title("Agent streams per proxy-server").
			Description("Agent streams each proxy-server replica holds. Every agent opens one stream to every replica, so the replicas should hold about as many each.").
			Targets(targets(query(`sum by (pod) (cluster_proxy_server_agent_streams)`, "{{pod}}"))).
			Min(0).Decimals(0).
			Span(12).Height(8)).
		WithPanel(timeseriesPanel().
			Title("Connected clusters per proxy-server").
			Description("Clusters with at least one agent connected to each proxy-server replica. A replica below the others cannot serve requests to the clusters it lacks.").
			Targets(targets(query(`sum by (pod) (cluster_proxy_connected_clusters)`, "{{pod}}"))).
			Min(0).Decimals(0).
			Span(12).Height(8)).
		// Requests through the tunnels, as the proxy-servers see them.
		WithRow(dashboard.NewRowBuilder("Requests")).
		WithPanel(timeseriesPanel().
			Title("Request rate by code").
			Description("Requests to managed clusters per second, by HTTP status code (101 upgraded connections, 499 the client went away).").
			Targets(targets(query(`sum by (code) (rate(cluster_proxy_cluster_requests_total[$__rate_interval]))`, "{{code}}"))).
			Unit("reqps").Min(0).
			Span(12).Height(8)).
		WithPanel(timeseriesPanel().
			Title("Request rate by way in and verb").
			Description("Requests to managed clusters per second, by way in (user-server or the hub's aggregated API) and authorization verb.").
			Targets(targets(query(`sum by (via, verb) (rate(cluster_proxy_cluster_requests_total[$__rate_interval]))`, "{{via}} {{verb}}"))).
			Unit("reqps").Min(0).
			Span(12).Height(8)).
		WithPanel(timeseriesPanel().
			Title("Request latency p50 / p99").
			Description("Time until a managed cluster's answer began (the headers of a watch, log or upgrade), by way in.").
			Targets(targets(
				query(`histogram_quantile(0.5, sum by (le, via) (rate(cluster_proxy_cluster_request_duration_seconds_bucket[$__rate_interval])))`, "p50 {{via}}"),
				query(`histogram_quantile(0.99, sum by (le, via) (rate(cluster_proxy_cluster_request_duration_seconds_bucket[$__rate_interval])))`, "p99 {{via}}"),
			)).
			Unit("s").Min(0).
			Span(12).Height(8)).
		WithPanel(timeseriesPanel().
			Title("Refusals").
			Description("What the proxy-servers refused, per second: frontend dials whose client certificate may not reach the cluster, agent streams whose identifiers do not match their certificate, streams and dials over a limit, and TokenReviews not made (answered 429).").
			Targets(targets(
				query(`sum by (reason) (rate(cluster_proxy_server_frontend_refusals_total[$__rate_interval]))`, "frontend {{reason}}"),
				query(`sum by (reason) (rate(cluster_proxy_agent_identity_refusals_total[$__rate_interval]))`, "agent identity {{reason}}"),
				query(`sum by (limit) (rate(cluster_proxy_server_limit_refusals_total[$__rate_interval]))`, "limit {{limit}}"),
				query(`sum by (lane) (rate(cluster_proxy_token_reviews_refused_total[$__rate_interval]))`, "token review {{lane}}"),
			)).
			Unit("ops").Min(0).
			Span(12).Height(8)).
		// Certificates: time left before anything the tunnels depend on expires.
		WithRow(dashboard.NewRowBuilder("Certificates")).
		WithPanel(statPanel().
			Title("Earliest agent certificate expiry").
			Description("Time left on the agent client certificate that expires first, over every managed cluster. The add-on framework renews them well before; a value that keeps falling means renewal fails.").
			Targets(targets(query(`min(cluster_proxy_cluster_agent_certificate_expiry_timestamp_seconds) - time()`, "time left"))).
			Unit("s").
			Thresholds(thresholds("red", step(86400, "orange"), step(7*86400, "green"))).
			ColorMode(common.BigValueColorModeBackground).
			Span(6).Height(4)).
		WithPanel(statPanel().
			Title("ProxyCertificates not Ready").
			Description("ProxyCertificates whose condition Ready is not True.").
			Targets(targets(query(`count(cluster_proxy_certificate_ready == 0) or vector(0)`, "not Ready"))).
			Thresholds(thresholds("green", step(1, "red"))).
			ColorMode(common.BigValueColorModeBackground).
			Span(6).Height(4)).
		WithPanel(statPanel().
			Title("CA bundle certificates").
			Description("CAs in each configuration's published bundle: 1, or more while a CA rollover waits for every certificate of the earlier CA to be re-issued.").
			Targets(targets(query(`max by (configuration) (cluster_proxy_ca_bundle_certificates)`, "{{configuration}}"))).
			Thresholds(thresholds("green", step(2, "orange"))).
			Span(12).Height(4)).
		WithPanel(timeseriesPanel().
			Title("ProxyCertificate time left").
			Description("Time until the certificate each ProxyCertificate issued expires.").
			Targets(targets(query(`min by (namespace, name) (cluster_proxy_certificate_expiry_timestamp_seconds) - time()`, "{{namespace}}/{{name}}"))).
			Unit("s").
			Span(12).Height(8)).
		WithPanel(timeseriesPanel().
			Title("CA time left").
			Description("Time until the CA that signs each ManagedProxyConfiguration's certificates expires.").
			Targets(targets(query(`min by (configuration) (cluster_proxy_ca_expiry_timestamp_seconds) - time()`, "{{configuration}}"))).
			Unit("s").
			Span(12).Height(8)).
		WithPanel(timeseriesPanel().
			Title("CSR decisions").
			Description("CSRs of the add-on the operator approved or denied, by decision and reason, and the proxy-agent CSRs it signed, per interval.").
			Targets(targets(
				query(`sum by (decision, reason) (increase(cluster_proxy_agent_csr_decisions_total[$__rate_interval]))`, "{{decision}} {{reason}}"),
				query(`sum(increase(cluster_proxy_agent_csrs_signed_total[$__rate_interval]))`, "signed"),
			)).
			Min(0).
			Span(24).Height(8)).
		// The manager: whether it leads and keeps up with its work.
		WithRow(dashboard.NewRowBuilder("Manager")).
		WithPanel(timeseriesPanel().
			Title("Reconciles by controller and result").
			Description("Reconciles of the manager's controllers per second, by result.").
			Targets(targets(query(`sum by (controller, result) (rate(controller_runtime_reconcile_total{`+managerJob+`}[$__rate_interval]))`, "{{controller}} {{result}}"))).
			Unit("ops").Min(0).
			Span(12).Height(8)).
		WithPanel(timeseriesPanel().
			Title("Reconcile errors").
			Description("Reconciles that ended in an error per second, by controller.").
			Targets(targets(query(`sum by (controller) (rate(controller_runtime_reconcile_errors_total{`+managerJob+`}[$__rate_interval]))`, "{{controller}}"))).
			Unit("ops").Min(0).
			Span(12).Height(8)).
		WithPanel(timeseriesPanel().
			Title("Work queue depth").
			Description("Items waiting in each of the manager's work queues. A depth that keeps growing means the manager falls behind.").
			Targets(targets(query(`sum by (name) (workqueue_depth{`+managerJob+`})`, "{{name}}"))).
			Min(0).Decimals(0).
			Span(12).Height(8)).
		WithPanel(timeseriesPanel().
			Title("Leader").
			Description("1 for the manager replica that holds the lease. The manager reports the clusters' and certificates' series only while it leads.").
			Targets(targets(query(`max by (pod, name) (leader_election_master_status{`+managerJob+`})`, "{{pod}} {{name}}"))).
			Min(0).Max(1).Decimals(0).
			Span(12).Height(8)).
		Build()
}
