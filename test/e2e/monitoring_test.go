//go:build e2e

package e2e

import (
	"context"
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
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/kubeclient"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/localsystem"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/repo"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/promserver"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/requestloop"
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
			jobs := scrapeJobs()
			discovery, stop := context.WithCancel(ctx())
			DeferCleanup(stop)
			discoverTargets(discovery, dir, jobs)
			var err error
			prom, err = promserver.Start(ctx(), dir, prometheusConfig(dir, jobs))
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
			// Requests to every cluster through both ways in, all along, so that the request panels show rates and
			// latencies rather than zeros.
			var loops []*requestloop.Loop
			for _, cluster := range clusterNames() {
				for _, kc := range []string{userKubeconfig(cluster, "monitoring", viewerToken(cluster)), viaHubKubeconfig(cluster, "monitoring", "")} {
					l := must(requestloop.Start(userRESTConfig(kc), 200*time.Millisecond))
					DeferCleanup(func() { l.Stop() })
					loops = append(loops, l)
				}
			}
			for _, l := range loops {
				Eventually(l.Succeeded).Should(BeNumerically(">", 0), "every way in answers")
			}
			queries := dashboardQueries()
			Expect(queries).NotTo(BeEmpty())
			Eventually(func(g Gomega) {
				var empty []string
				results := map[string]model.Vector{}
				for _, q := range queries {
					v := must(prom.Query(ctx(), q.expr))
					results[q.expr] = v
					if len(v) == 0 && !troublePanels[q.panel] {
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
					g.Expect(metricNames(a.Expr)).NotTo(BeEmpty(), "%s reads no metric this check knows", a.Alert)
					for _, name := range metricNames(a.Expr) {
						if recordMetric(name) {
							continue // only where records are configured: the records chapter finds them there
						}
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
			// The panels that list trouble, empty while every cluster is well, show the cluster that was cut.
			var trouble []dashboardQuery
			results := map[string]model.Vector{}
			for _, q := range dashboardQueries() {
				if troublePanels[q.panel] {
					trouble = append(trouble, q)
					results[q.expr] = must(prom.Query(ctx(), q.expr))
					Expect(results[q.expr]).To(ContainElement(HaveField("Metric", HaveKeyWithValue(model.LabelName("cluster"), model.LabelValue(cluster)))), q.String())
				}
			}
			Expect(trouble).To(HaveLen(len(troublePanels)))
			printResults("the panels that list trouble, with "+cluster+" cut off", trouble, results)

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

// scrapeJob is what one job of the monitoring spec's Prometheus scrapes: port of the pods labelled selector in
// namespace ("" every namespace) of one cluster, through that cluster's kube-apiserver's pod proxy.
type scrapeJob struct {
	name      string
	cfg       *rest.Config
	pods      client.Client
	namespace string
	selector  map[string]string
	port      int32
	labels    map[string]string // added to every series (a managed cluster's name)
}

// scrapeJobs are the manager, the proxy-servers, and each managed cluster's agents.
func scrapeJobs() []scrapeJob {
	serverHealth := contract.PortsOf(&proxyv1alpha1.ManagedProxyConfiguration{}).HealthServer
	jobs := []scrapeJob{
		{name: managerJob, cfg: sys.Hub.Config, pods: sys.HubClient, namespace: localsystem.Namespace, selector: managerLabels, port: 8080},
		{name: proxyServerJob, cfg: sys.Hub.Config, pods: sys.HubClient, namespace: localsystem.Namespace, selector: proxyServerLabels, port: serverHealth},
	}
	for _, c := range sys.Managed {
		jobs = append(jobs, scrapeJob{name: agentJobPrefix + c.Name(), cfg: c.Config, pods: managedClient(c.Name()),
			selector: agentLabels, port: contract.AgentHealthPort, labels: map[string]string{"cluster": c.Name()}})
	}
	return jobs
}

// prometheusConfig scrapes every job every scrapeEvery with its cluster's admin credentials (written to dir), from
// the targets discoverTargets writes to dir (file_sd: Debian's Prometheus is built without kubernetes_sd), and loads
// the chart's alerts.
func prometheusConfig(dir string, jobs []scrapeJob) []byte {
	GinkgoHelper()
	var scrape []any
	for _, j := range jobs {
		prefix := filepath.Join(dir, strings.ReplaceAll(j.name, "/", "_"))
		ca, cert, key := prefix+"-ca.crt", prefix+".crt", prefix+".key"
		Expect(os.WriteFile(ca, j.cfg.CAData, 0o600)).To(Succeed())
		Expect(os.WriteFile(cert, j.cfg.CertData, 0o600)).To(Succeed())
		Expect(kubeclient.WritePrivateFile(key, j.cfg.KeyData)).To(Succeed())
		scrape = append(scrape, map[string]any{
			"job_name": j.name, "scheme": "https",
			"tls_config":      map[string]any{"ca_file": ca, "cert_file": cert, "key_file": key},
			"file_sd_configs": []any{map[string]any{"files": []string{targetsFile(dir, j)}, "refresh_interval": scrapeEvery}},
		})
	}
	config := map[string]any{
		"global":         map[string]any{"scrape_interval": scrapeEvery, "evaluation_interval": scrapeEvery, "scrape_timeout": "4s"},
		"rule_files":     []string{filepath.Join(repo.Root(), "charts", "cluster-proxy", "files", "alerts.yaml")},
		"scrape_configs": scrape,
	}
	return must(yaml.Marshal(config))
}

func targetsFile(dir string, j scrapeJob) string {
	return filepath.Join(dir, strings.ReplaceAll(j.name, "/", "_")+"-targets.json")
}

// discoverTargets writes each job's running pods as file_sd targets, every scrapeEvery until ctx ends, as a Prometheus
// with kubernetes_sd would find them: the kube-apiserver's address, the pod's proxy path, its namespace and name.
func discoverTargets(c context.Context, dir string, jobs []scrapeJob) {
	write := func(c context.Context) {
		for _, j := range jobs {
			pods := &corev1.PodList{}
			opts := []client.ListOption{client.MatchingLabels(j.selector)}
			if j.namespace != "" {
				opts = append(opts, client.InNamespace(j.namespace))
			}
			if err := j.pods.List(c, pods, opts...); err != nil {
				continue // a cluster cut off the network: its last targets stand
			}
			groups := []any{}
			for _, p := range pods.Items {
				if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
					continue
				}
				labels := map[string]string{"__metrics_path__": fmt.Sprintf("/api/v1/namespaces/%s/pods/%s:%d/proxy/metrics", p.Namespace, p.Name, j.port),
					"namespace": p.Namespace, "pod": p.Name}
				for k, v := range j.labels {
					labels[k] = v
				}
				groups = append(groups, map[string]any{"targets": []string{strings.TrimPrefix(j.cfg.Host, "https://")}, "labels": labels})
			}
			raw := must(json.Marshal(groups))
			// Written aside, then renamed: Prometheus never reads half a file.
			tmp := targetsFile(dir, j) + ".tmp"
			if os.WriteFile(tmp, raw, 0o600) == nil {
				_ = os.Rename(tmp, targetsFile(dir, j))
			}
		}
	}
	write(c) // before Prometheus starts, which then finds targets at once
	go wait.UntilWithContext(c, write, 5*time.Second)
}

// troublePanels list what is wrong, so they are empty while every cluster is well; the network cut must show in them.
var troublePanels = map[string]bool{"Clusters not Available: conditions not True": true}

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
