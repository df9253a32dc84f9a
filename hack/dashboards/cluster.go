package main

import (
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
)

// sel is the selector of the chosen managed cluster.
const sel = `cluster="$cluster"`

// clusterDashboard is "Cluster proxy / Cluster": one managed cluster, picked with the cluster variable. Its state
// comes from the manager (which reports what the proxy-servers hold of the cluster's agents), its traffic from the
// proxy-servers. The agent's own series come from the managed cluster and reach the hub's Prometheus only if someone
// ships them there, so they sit in a collapsed row that says so.
func clusterDashboard() (dashboard.Dashboard, error) {
	condition := valueText(map[string]dashboard.ValueMappingResult{
		"1": result("True", "green"),
		"0": result("not True", "red"),
	})
	return dashboard.NewDashboardBuilder("Cluster proxy / Cluster").
		Uid("cluster-proxy-cluster").
		Description("One managed cluster's tunnel: its conditions, agents, requests and user-server tunnels, from the series of the hub's manager and proxy-servers.").
		Tags([]string{"cluster-proxy"}).
		Time("now-6h", "now").
		Refresh("1m").
		Timezone(common.TimeZoneBrowser).
		Tooltip(dashboard.DashboardCursorSyncCrosshair).
		WithVariable(datasourceVariable()).
		// The manager reports every cluster with the add-on in this series, so its cluster label lists them all.
		WithVariable(dashboard.NewQueryVariableBuilder("cluster").
			Label("Cluster").
			Datasource(datasource()).
			Query(dashboard.StringOrMap{String: ptr(`label_values(cluster_proxy_cluster_status_condition, cluster)`)}).
			Definition(`label_values(cluster_proxy_cluster_status_condition, cluster)`).
			Refresh(dashboard.VariableRefreshOnTimeRangeChanged).
			Sort(dashboard.VariableSortAlphabeticalAsc)).
		// Status: the conditions of the cluster's ClusterProxyStatus and the figures behind them.
		WithRow(dashboard.NewRowBuilder("Status")).
		WithPanel(statPanel().
			Title("Agent installed").
			Description("Whether the cluster's agent is installed (its ManifestWork applied).").
			Targets(targets(query(`max(cluster_proxy_cluster_installed{`+sel+`})`, "installed"))).
			Mappings(valueText(map[string]dashboard.ValueMappingResult{
				"1": result("yes", "green"),
				"0": result("no", "red"),
			})).
			ColorMode(common.BigValueColorModeBackground).
			Span(4).Height(4)).
		WithPanel(statPanel().
			Title("Connected agents").
			Description("Agents of the cluster that every proxy-server replica holds (the count of the replica holding the fewest).").
			Targets(targets(query(`max(cluster_proxy_cluster_connected_agents{`+sel+`})`, "agents"))).
			Thresholds(thresholds("red", step(1, "green"))).
			ColorMode(common.BigValueColorModeBackground).
			Span(4).Height(4)).
		WithPanel(statPanel().
			Title("Proxy-servers holding its agents").
			Description("Proxy-server replicas holding at least one of the cluster's agents; a request reaches the cluster only through one of them.").
			Targets(targets(query(`max(cluster_proxy_cluster_proxy_servers_with_agents{`+sel+`})`, "holding"))).
			Span(4).Height(4)).
		WithPanel(statPanel().
			Title("Proxy-servers answering").
			Description("Proxy-server replicas that answered the manager's last tunnel health round. Fewer holding the cluster's agents than answering means some replicas cannot route to it.").
			Targets(targets(query(`max(cluster_proxy_tunnel_health_proxy_servers)`, "answering"))).
			Span(4).Height(4)).
		WithPanel(statPanel().
			Title("Probe latency").
			Description("Latency of the last reported GET /healthz through the cluster's tunnel.").
			Targets(targets(query(`max(cluster_proxy_cluster_probe_latency_seconds{`+sel+`})`, "latency"))).
			Unit("s").
			Span(4).Height(4)).
		WithPanel(statPanel().
			Title("Agent certificate time left").
			Description("Time until the client certificate of the cluster's agent expires. The add-on framework renews it well before; a value that keeps falling means renewal fails.").
			Targets(targets(query(`min(cluster_proxy_cluster_agent_certificate_expiry_timestamp_seconds{`+sel+`}) - time()`, "time left"))).
			Unit("s").
			Thresholds(thresholds("red", step(86400, "orange"), step(7*86400, "green"))).
			ColorMode(common.BigValueColorModeBackground).
			Span(4).Height(4)).
		WithPanel(tablePanel().
			Title("Conditions").
			Description("The status of each condition of the cluster's ClusterProxyStatus now.").
			Targets(targets(tableQuery(`max by (condition, status) (cluster_proxy_cluster_status_condition{` + sel + `} == 1)`))).
			WithTransformation(hideTableColumns()).
			Span(8).Height(8)).
		WithPanel(stateTimelinePanel().
			Title("Condition history").
			Description("Each condition over time: True, or not True (False or Unknown; the Conditions table tells which).").
			Targets(targets(query(`max by (condition) (cluster_proxy_cluster_status_condition{`+sel+`,status="True"})`, "{{condition}}"))).
			Mappings(condition).
			MergeValues(true).
			ShowValue(common.VisibilityModeNever).
			Span(16).Height(8)).
		// Tunnel: the agents the proxy-servers hold and how often that changes.
		WithRow(dashboard.NewRowBuilder("Tunnel")).
		WithPanel(timeseriesPanel().
			Title("Agents and proxy-servers").
			Description("Connected agents of the cluster, proxy-server replicas holding them, and replicas answering the manager.").
			Targets(targets(
				query(`max(cluster_proxy_cluster_connected_agents{`+sel+`})`, "connected agents"),
				query(`max(cluster_proxy_cluster_proxy_servers_with_agents{`+sel+`})`, "proxy-servers holding its agents"),
				query(`max(cluster_proxy_tunnel_health_proxy_servers)`, "proxy-servers answering"),
			)).
			Min(0).Decimals(0).
			Span(12).Height(8)).
		WithPanel(timeseriesPanel().
			Title("Probe latency over time").
			Description("Latency of the last reported GET /healthz through the cluster's tunnel (the status updates it when it halves or doubles).").
			Targets(targets(query(`max(cluster_proxy_cluster_probe_latency_seconds{`+sel+`})`, "probe"))).
			Unit("s").Min(0).
			Span(12).Height(8)).
		WithPanel(timeseriesPanel().
			Title("Tunnel reconnects").
			Description("Changes of the cluster's connected agents and of the proxy-servers holding them, per interval: agents that dropped and came back. The hub sees no reconnect that completes between two rounds of the manager; the agent's own count is in the Agent row.").
			Targets(targets(
				query(`sum(changes(cluster_proxy_cluster_connected_agents{`+sel+`}[$__rate_interval]))`, "connected agents changes"),
				query(`sum(changes(cluster_proxy_cluster_proxy_servers_with_agents{`+sel+`}[$__rate_interval]))`, "proxy-servers holding changes"),
			)).
			Min(0).Decimals(0).
			Span(24).Height(8)).
		// Requests: the cluster's traffic through the proxy-servers. Empty when they run with
		// --per-cluster-metrics=false, which drops the cluster label from these series.
		WithRow(dashboard.NewRowBuilder("Requests")).
		WithPanel(timeseriesPanel().
			Title("Request rate by code").
			Description("Requests to the cluster per second, by HTTP status code (101 upgraded connections, 499 the client went away). Empty when the proxy-servers run with --per-cluster-metrics=false.").
			Targets(targets(query(`sum by (code) (rate(cluster_proxy_cluster_requests_total{`+sel+`}[$__rate_interval]))`, "{{code}}"))).
			Unit("reqps").Min(0).
			Span(8).Height(8)).
		WithPanel(timeseriesPanel().
			Title("Request rate by way in and verb").
			Description("Requests to the cluster per second, by way in (user-server or the hub's aggregated API) and authorization verb.").
			Targets(targets(query(`sum by (via, verb) (rate(cluster_proxy_cluster_requests_total{`+sel+`}[$__rate_interval]))`, "{{via}} {{verb}}"))).
			Unit("reqps").Min(0).
			Span(8).Height(8)).
		WithPanel(timeseriesPanel().
			Title("Request latency p50 / p99").
			Description("Time until the cluster's answer began (the headers of a watch, log or upgrade), by way in.").
			Targets(targets(
				query(`histogram_quantile(0.5, sum by (le, via) (rate(cluster_proxy_cluster_request_duration_seconds_bucket{`+sel+`}[$__rate_interval])))`, "p50 {{via}}"),
				query(`histogram_quantile(0.99, sum by (le, via) (rate(cluster_proxy_cluster_request_duration_seconds_bucket{`+sel+`}[$__rate_interval])))`, "p99 {{via}}"),
			)).
			Unit("s").Min(0).
			Span(8).Height(8)).
		// User-server tunnels: the pooled tunnels to the cluster's service-proxy.
		WithRow(dashboard.NewRowBuilder("User-server tunnels")).
		WithPanel(timeseriesPanel().
			Title("User-server tunnels open").
			Description("Tunnels to the cluster's service-proxy open now in each proxy-server replica, in use or idle in the pool.").
			Targets(targets(query(`sum by (pod) (cluster_proxy_user_server_tunnels_open{`+sel+`})`, "{{pod}}"))).
			Min(0).Decimals(0).
			Span(8).Height(8)).
		WithPanel(timeseriesPanel().
			Title("User-server tunnels opened").
			Description("Tunnels the user-server opened to the cluster's service-proxy per second. Pooled tunnels are reused, so this stays far below the request rate.").
			Targets(targets(query(`sum(rate(cluster_proxy_user_server_tunnels_opened_total{`+sel+`}[$__rate_interval]))`, "opened"))).
			Unit("ops").Min(0).
			Span(8).Height(8)).
		WithPanel(timeseriesPanel().
			Title("User-server tunnel dial failures").
			Description("Tunnels to the cluster's service-proxy that could not be opened, per second.").
			Targets(targets(query(`sum(rate(cluster_proxy_user_server_tunnel_dial_failures_total{`+sel+`}[$__rate_interval]))`, "failed"))).
			Unit("ops").Min(0).
			Span(8).Height(8)).
		// The agent's own series, collapsed: the agents run on the managed clusters, and the hub's Prometheus does
		// not scrape them. They show here only if the cluster's series reach it with a cluster label of the
		// cluster's name (remote write or federation with such an external label).
		WithRow(dashboard.NewRowBuilder("Agent (only if the managed cluster's agent series reach this Prometheus)").
			WithPanel(timeseriesPanel().
				Title("Agent tunnel connects").
				Description("The agent's attempts to open a tunnel to a proxy-server, per second, by result. Needs the agent's series with a cluster label; empty otherwise.").
				Targets(targets(query(`sum by (result) (rate(cluster_proxy_agent_server_connects_total{`+sel+`}[$__rate_interval]))`, "{{result}}"))).
				Unit("ops").Min(0).
				Span(12).Height(8)).
			WithPanel(timeseriesPanel().
				Title("Agent tunnels and connections").
				Description("Tunnels (streams to distinct proxy-servers) the agent holds, and connections to destinations open through them.").
				Targets(targets(
					query(`sum(cluster_proxy_agent_tunnels{`+sel+`})`, "tunnels"),
					query(`sum(cluster_proxy_agent_open_connections{`+sel+`})`, "open connections"),
				)).
				Min(0).Decimals(0).
				Span(12).Height(8)).
			WithPanel(timeseriesPanel().
				Title("Agent dials").
				Description("Dial requests from the hub per second, by destination and result.").
				Targets(targets(query(`sum by (destination, result) (rate(cluster_proxy_agent_dials_total{`+sel+`}[$__rate_interval]))`, "{{destination}} {{result}}"))).
				Unit("ops").Min(0).
				Span(12).Height(8)).
			WithPanel(timeseriesPanel().
				Title("Agent throughput").
				Description("Payload bytes per second through the tunnels: to_hub read from destinations, from_hub written to them.").
				Targets(targets(query(`sum by (direction) (rate(cluster_proxy_agent_bytes_total{`+sel+`}[$__rate_interval]))`, "{{direction}}"))).
				Unit("Bps").Min(0).
				Span(12).Height(8))).
		Build()
}
