//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/kubeclient"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/localsystem"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/localsystem/realcluster"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/repo"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/promserver"
)

// The jobs the monitoring spec's Prometheus scrapes: named as the chart's ServiceMonitor and PodMonitor name theirs
// (the dashboards select the manager's job by name), and one per managed cluster for its agents.
const (
	managerJob     = "cluster-proxy-addon-manager-metrics"
	proxyServerJob = localsystem.Namespace + "/cluster-proxy-proxy-server"
	agentJobPrefix = "cluster-proxy-agents-"
	// scrapeEvery is short, so that rates over a minute have samples and alerts are evaluated often.
	scrapeEvery = "5s"
)

// monitoring runs a real Prometheus (Debian's) beside the system: it scrapes the manager, every proxy-server and every
// agent through their kube-apiservers' pod proxy, as a Prometheus with kubernetes_sd does, and evaluates the alerts
// the chart ships. Every dashboard query and every series an alert reads must have data, and cutting cluster1 off the
// network fires ClusterProxyTunnelDown, which resolves once it is back.
func monitoring() {
	Context("monitored by a real Prometheus with the shipped alerts and dashboards", Ordered, func() {
		var prom *promserver.Server

		BeforeAll(func() {
			dir := filepath.Join(workDir, "prometheus")
			Expect(os.MkdirAll(dir, 0o700)).To(Succeed())
			config := prometheusConfig(dir)
			var err error
			prom, err = promserver.Start(ctx(), dir, config)
			Expect(err).NotTo(HaveOccurred())
			DeferCleanup(prom.Stop)
		})

		It("scrapes the manager, every proxy-server replica and every cluster's agents", func() {
			Eventually(func(g Gomega) {
				up := must(prom.Query(ctx(), "up"))
				byJob := map[string]int{}
				for _, s := range up {
					g.Expect(float64(s.Value)).To(Equal(1.0), "target %s is down", s.Metric)
					byJob[string(s.Metric["job"])]++
				}
				g.Expect(byJob[managerJob]).To(BeNumerically(">=", 1), "%v", byJob)
				g.Expect(byJob[proxyServerJob]).To(Equal(len(proxyServerPods(g))), "%v", byJob)
				for _, cluster := range clusterNames() {
					g.Expect(byJob[agentJobPrefix+cluster]).To(BeNumerically(">=", 1), "%v", byJob)
				}
			}).WithTimeout(3 * time.Minute).WithPolling(2 * time.Second).Should(Succeed())
		})

		It("answers every dashboard query with series from the system", func() {
			// Requests to every cluster through both ways in, so that request series exist for each.
			for _, cluster := range clusterNames() {
				user := userKubeconfig(cluster, "monitoring", viewerToken(cluster))
				viaHub := viaHubKubeconfig(cluster, "monitoring", "")
				for range 3 {
					Expect(kubeclient.Kubectl(user, "get", "namespaces")).To(ContainSubstring("default"))
					Expect(kubeclient.Kubectl(viaHub, "get", "namespaces")).To(ContainSubstring("default"))
				}
			}
			queries := dashboardQueries()
			Expect(queries).NotTo(BeEmpty())
			Eventually(func(g Gomega) {
				var empty []string
				results := map[string]model.Vector{}
				for _, q := range queries {
					v := must(prom.Query(ctx(), q.expr))
					results[q.expr] = v
					if len(v) == 0 {
						empty = append(empty, q.String())
					}
				}
				g.Expect(empty).To(BeEmpty(), "dashboard queries without series")
				printResults("dashboard queries", queries, results)
			}).WithTimeout(3 * time.Minute).WithPolling(10 * time.Second).Should(Succeed())
		})

		It("has real series behind every alert expression", func() {
			alerts := shippedAlerts()
			Expect(alerts).NotTo(BeEmpty())
			Eventually(func(g Gomega) {
				var missing []string
				for _, a := range alerts {
					for _, name := range metricNames(a.Expr) {
						if len(must(prom.Query(ctx(), fmt.Sprintf("count({__name__=%q})", name)))) == 0 {
							missing = append(missing, a.Alert+": "+name)
						}
					}
				}
				g.Expect(missing).To(BeEmpty(), "series the alerts read that no target reports")
			}).WithTimeout(2 * time.Minute).WithPolling(10 * time.Second).Should(Succeed())
			firing := must(prom.API.Alerts(ctx()))
			for _, a := range firing.Alerts {
				GinkgoWriter.Printf("alert %s %s %v\n", a.Labels["alertname"], a.State, a.Labels)
			}
			Expect(must(prom.Firing(ctx(), "ClusterProxyTunnelDown"))).To(BeEmpty(), "every cluster is connected")
		})

		It("fires ClusterProxyTunnelDown for cluster1 cut off the network within its for, and resolves it after", func() {
			const cluster = "cluster1"
			node := managedCluster(cluster)
			cut := time.Now()
			Expect(node.Disconnect()).To(Succeed())
			reconnected := false
			reconnect := func() {
				if !reconnected {
					reconnected = true
					Expect(node.Reconnect()).To(Succeed())
				}
			}
			DeferCleanup(reconnect)

			var firedAt time.Time
			Eventually(func(g Gomega) {
				alerts := must(prom.Firing(ctx(), "ClusterProxyTunnelDown"))
				g.Expect(alerts).To(ContainElement(HaveField("Labels", HaveKeyWithValue(model.LabelName("cluster"), model.LabelValue(cluster)))))
				firedAt = time.Now()
			}).WithTimeout(6 * time.Minute).WithPolling(5 * time.Second).Should(Succeed())
			state := must(prom.Query(ctx(), `cluster_proxy_cluster_status_condition{condition="AgentConnected",status="False"} == 1`))
			GinkgoWriter.Printf("ClusterProxyTunnelDown fired for %s %s after the cut; AgentConnected=False: %v\n",
				cluster, firedAt.Sub(cut).Round(time.Second), state)
			for _, other := range must(prom.Firing(ctx(), "ClusterProxyTunnelDown")) {
				Expect(string(other.Labels["cluster"])).To(Equal(cluster), "only the cluster that was cut")
			}

			reconnect()
			back := time.Now()
			Eventually(func(g Gomega) {
				g.Expect(must(prom.Firing(ctx(), "ClusterProxyTunnelDown"))).To(BeEmpty())
			}).WithTimeout(4 * time.Minute).WithPolling(5 * time.Second).Should(Succeed())
			GinkgoWriter.Printf("ClusterProxyTunnelDown resolved %s after %s was reconnected\n", time.Since(back).Round(time.Second), cluster)
			expectEveryClusterAvailable()
		})
	})
}

// prometheusConfig scrapes the hub's manager and proxy-servers and each managed cluster's agents through their
// kube-apiserver's pod proxy (with each cluster's admin credentials, written to dir), every scrapeEvery, and loads the
// chart's alerts.
func prometheusConfig(dir string) []byte {
	GinkgoHelper()
	type cred struct{ CAFile, CertFile, KeyFile string }
	credentials := func(name string, cfg *rest.Config) cred {
		c := cred{filepath.Join(dir, name+"-ca.crt"), filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")}
		Expect(os.WriteFile(c.CAFile, cfg.CAData, 0o600)).To(Succeed())
		Expect(os.WriteFile(c.CertFile, cfg.CertData, 0o600)).To(Succeed())
		Expect(kubeclient.WritePrivateFile(c.KeyFile, cfg.KeyData)).To(Succeed())
		return c
	}
	tls := func(c cred) map[string]any {
		return map[string]any{"ca_file": c.CAFile, "cert_file": c.CertFile, "key_file": c.KeyFile}
	}
	// job scrapes port of the pods selected by selector in namespace ("" every namespace) of the cluster at cfg.
	job := func(name string, cfg *rest.Config, c cred, namespace, selector string, port int32, labels map[string]string) map[string]any {
		server := strings.TrimPrefix(cfg.Host, "https://")
		sd := map[string]any{"role": "pod", "api_server": cfg.Host, "tls_config": tls(c),
			"selectors": []any{map[string]any{"role": "pod", "label": selector}}}
		if namespace != "" {
			sd["namespaces"] = map[string]any{"names": []string{namespace}}
		}
		relabel := []any{
			map[string]any{"source_labels": []string{"__meta_kubernetes_pod_phase"}, "regex": "Running", "action": "keep"},
			map[string]any{"source_labels": []string{"__meta_kubernetes_namespace", "__meta_kubernetes_pod_name"},
				"regex": "(.+);(.+)", "target_label": "__metrics_path__",
				"replacement": fmt.Sprintf("/api/v1/namespaces/$1/pods/$2:%d/proxy/metrics", port)},
			map[string]any{"target_label": "__address__", "replacement": server},
			map[string]any{"source_labels": []string{"__meta_kubernetes_namespace"}, "target_label": "namespace"},
			map[string]any{"source_labels": []string{"__meta_kubernetes_pod_name"}, "target_label": "pod"},
		}
		for k, v := range labels {
			relabel = append(relabel, map[string]any{"target_label": k, "replacement": v})
		}
		return map[string]any{"job_name": name, "scheme": "https", "tls_config": tls(c), "honor_labels": false,
			"kubernetes_sd_configs": []any{sd}, "relabel_configs": relabel}
	}
	hub := credentials("hub", sys.Hub.Config)
	serverHealth := contract.PortsOf(&proxyv1alpha1.ManagedProxyConfiguration{}).HealthServer
	jobs := []any{
		job(managerJob, sys.Hub.Config, hub, localsystem.Namespace, "app.kubernetes.io/name=cluster-proxy-operator", 8080, nil),
		job(proxyServerJob, sys.Hub.Config, hub, localsystem.Namespace,
			proxyv1alpha1.ComponentLabel+"="+proxyv1alpha1.ComponentProxyServer, serverHealth, nil),
	}
	for _, c := range sys.Managed {
		jobs = append(jobs, job(agentJobPrefix+c.Name(), c.Config, credentials(c.Name(), c.Config), "",
			proxyv1alpha1.ComponentLabel+"=proxy-agent", contract.AgentHealthPort, map[string]string{"cluster": c.Name()}))
	}
	config := map[string]any{
		"global":         map[string]any{"scrape_interval": scrapeEvery, "evaluation_interval": scrapeEvery, "scrape_timeout": "4s"},
		"rule_files":     []string{filepath.Join(repo.Root(), "charts", "cluster-proxy", "files", "alerts.yaml")},
		"scrape_configs": jobs,
	}
	return must(yaml.Marshal(config))
}

// dashboardQuery is one query of a shipped dashboard, its variables replaced.
type dashboardQuery struct{ dashboard, panel, expr string }

func (q dashboardQuery) String() string { return q.dashboard + " / " + q.panel + ": " + q.expr }

// dashboardQueries are the queries of every panel of the chart's dashboards, with $cluster as cluster1 and the
// intervals Grafana would give a short range.
func dashboardQueries() []dashboardQuery {
	GinkgoHelper()
	paths := must(filepath.Glob(filepath.Join(repo.Root(), "charts", "cluster-proxy", "files", "dashboards", "*.json")))
	vars := strings.NewReplacer("${cluster}", "cluster1", "$cluster", "cluster1", "$__rate_interval", "1m",
		"${__rate_interval}", "1m", "$__interval", "15s", "${__interval}", "15s")
	var out []dashboardQuery
	for _, path := range paths {
		var dashboard map[string]any
		Expect(json.Unmarshal(must(os.ReadFile(path)), &dashboard)).To(Succeed())
		title, _ := dashboard["title"].(string)
		var walk func(v any, panel string)
		walk = func(v any, panel string) {
			switch v := v.(type) {
			case map[string]any:
				if t, ok := v["title"].(string); ok {
					panel = t
				}
				if expr, ok := v["expr"].(string); ok && expr != "" {
					out = append(out, dashboardQuery{dashboard: title, panel: panel, expr: vars.Replace(expr)})
				}
				for k, child := range v {
					if k != "templating" {
						walk(child, panel)
					}
				}
			case []any:
				for _, child := range v {
					walk(child, panel)
				}
			}
		}
		walk(dashboard["panels"], "")
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// shippedAlert is an alerting rule of the chart.
type shippedAlert struct {
	Alert string `json:"alert"`
	Expr  string `json:"expr"`
}

func shippedAlerts() []shippedAlert {
	GinkgoHelper()
	var file struct {
		Groups []struct {
			Rules []shippedAlert `json:"rules"`
		} `json:"groups"`
	}
	Expect(yaml.Unmarshal(must(os.ReadFile(filepath.Join(repo.Root(), "charts", "cluster-proxy", "files", "alerts.yaml"))), &file)).To(Succeed())
	var out []shippedAlert
	for _, g := range file.Groups {
		out = append(out, g.Rules...)
	}
	return out
}

// metricName finds the product's metric names and controller-runtime's leader metric in a PromQL expression.
var metricName = regexp.MustCompile(`\b(cluster_proxy_[a-z_]+|leader_election_master_status)\b`)

// metricNames are the metrics expr reads, histogram series by their family's name.
func metricNames(expr string) []string {
	seen := map[string]bool{}
	var out []string
	for _, m := range metricName.FindAllString(expr, -1) {
		if !seen[m] {
			seen[m] = true
			out = append(out, m)
		}
	}
	return out
}

// printResults writes each query's samples to the spec's output: the proof a reader checks.
func printResults(what string, queries []dashboardQuery, results map[string]model.Vector) {
	GinkgoWriter.Printf("%s (%d), their results now:\n", what, len(queries))
	for _, q := range queries {
		v := results[q.expr]
		samples := make([]string, 0, len(v))
		for i, s := range v {
			if i == 4 {
				samples = append(samples, fmt.Sprintf("... %d series", len(v)))
				break
			}
			samples = append(samples, fmt.Sprintf("%v=%v", s.Metric, s.Value))
		}
		GinkgoWriter.Printf("  %s\n    -> %s\n", q, strings.Join(samples, "; "))
	}
}

// managedCluster is the node of the managed cluster named name.
func managedCluster(name string) *realcluster.Cluster {
	GinkgoHelper()
	for _, c := range sys.Managed {
		if c.Name() == name {
			return c
		}
	}
	Fail("no managed cluster " + name)
	return nil
}
