package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/promql/parser"
)

const (
	// chartDir is where the chart renders the dashboards from (templates/monitoring.yaml).
	chartDir = "../../charts/cluster-proxy/files/dashboards"
	// metricsDoc lists every metric the programs serve, one table row each.
	metricsDoc = "../../docs/metrics.md"
	// regenerate is what to run when the chart's files differ from the code.
	regenerate = "run `cd hack/dashboards && go run .`"
)

// The chart ships exactly the dashboards this program writes now, byte for byte.
func TestChartFilesUpToDate(t *testing.T) {
	want := map[string]bool{}
	for _, f := range files {
		want[f.name] = true
		data, err := render(f)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(chartDir, f.name))
		if err != nil {
			t.Errorf("%s: %v; %s", f.name, err, regenerate)
			continue
		}
		if !bytes.Equal(got, data) {
			t.Errorf("%s differs from what the code writes; %s", f.name, regenerate)
		}
	}
	// A dashboard dropped from the code must leave the chart too, or the chart keeps installing it.
	found, err := filepath.Glob(filepath.Join(chartDir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range found {
		if !want[filepath.Base(path)] {
			t.Errorf("%s is not written by the code; remove it or add it to files", path)
		}
	}
}

// Every query parses as PromQL once Grafana's variables are replaced, and names only metrics of docs/metrics.md.
func TestQueries(t *testing.T) {
	documented := documentedMetrics(t)
	p := parser.NewParser(parser.Options{})
	for _, f := range files {
		d := decode(t, f)
		if len(d.targets) == 0 {
			t.Errorf("%s: no queries", f.name)
		}
		for title, uid := range d.panelSources {
			if uid != "${datasource}" {
				t.Errorf("%s: %s: panel data source %q, want the ${datasource} variable", f.name, title, uid)
			}
		}
		for _, tg := range d.targets {
			where := f.name + ": " + tg.panel + " " + tg.RefID
			if tg.Datasource.UID != "${datasource}" {
				t.Errorf("%s: data source %q, want the ${datasource} variable", where, tg.Datasource.UID)
			}
			expr := substitute(tg.Expr)
			if strings.Contains(expr, "$") {
				t.Errorf("%s: a variable the test does not replace: %s", where, tg.Expr)
				continue
			}
			ast, err := p.ParseExpr(expr)
			if err != nil {
				t.Errorf("%s: %s does not parse: %v", where, tg.Expr, err)
				continue
			}
			names := metricNames(ast)
			if len(names) == 0 {
				t.Errorf("%s: %s selects no metric", where, tg.Expr)
			}
			for _, name := range names {
				if !isDocumented(documented, name) {
					t.Errorf("%s: metric %s is not in docs/metrics.md", where, name)
				}
			}
		}
		// A query variable's label_values(<metric>, <label>) must name a documented metric too.
		for _, v := range d.Templating.List {
			if v.Type != "query" {
				continue
			}
			var q string
			if err := json.Unmarshal(v.Query, &q); err != nil {
				t.Errorf("%s: variable %s: query is not a string: %s", f.name, v.Name, v.Query)
				continue
			}
			m := labelValues.FindStringSubmatch(q)
			if m == nil {
				t.Errorf("%s: variable %s: %q is not label_values(<metric>, <label>)", f.name, v.Name, q)
				continue
			}
			if !isDocumented(documented, m[1]) {
				t.Errorf("%s: variable %s: metric %s is not in docs/metrics.md", f.name, v.Name, m[1])
			}
		}
	}
}

// Uids and panel titles are what links and provisioning refer to: each dashboard has its fixed uid, and no two of
// its panels share a title.
func TestStableIdentifiers(t *testing.T) {
	wantUID := map[string]string{
		"cluster-proxy-fleet.json":   "cluster-proxy-fleet",
		"cluster-proxy-cluster.json": "cluster-proxy-cluster",
	}
	for _, f := range files {
		d := decode(t, f)
		if d.UID != wantUID[f.name] {
			t.Errorf("%s: uid %q, want %q", f.name, d.UID, wantUID[f.name])
		}
		seen := map[string]bool{}
		for _, title := range d.titles {
			if title == "" {
				t.Errorf("%s: a panel without a title", f.name)
			}
			if seen[title] {
				t.Errorf("%s: two panels titled %q", f.name, title)
			}
			seen[title] = true
		}
	}
}

// The cluster dashboard is driven by its cluster and datasource variables.
func TestClusterVariables(t *testing.T) {
	d := decode(t, files[1])
	got := map[string]string{}
	for _, v := range d.Templating.List {
		got[v.Name] = v.Type
	}
	if got["cluster"] != "query" || got["datasource"] != "datasource" {
		t.Errorf("%s: variables %v, want cluster (query) and datasource (datasource)", files[1].name, got)
	}
}

// panelJSON is the part of a panel (or row) the tests read.
type panelJSON struct {
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	Targets []targetJSON `json:"targets"`
	Panels  []panelJSON  `json:"panels"`
}

type targetJSON struct {
	RefID      string `json:"refId"`
	Expr       string `json:"expr"`
	Datasource struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	panel string
}

// decoded is a dashboard as its JSON file has it, with every panel's targets and titles collected (a collapsed
// row's panels are nested in the row).
type decoded struct {
	UID        string      `json:"uid"`
	Panels     []panelJSON `json:"panels"`
	Templating struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	targets []targetJSON
	titles  []string
	// panelSources are the data sources of the panels (not rows), by title.
	panelSources map[string]string
}

// decode reads the JSON the program writes for f, as Grafana would receive it.
func decode(t *testing.T, f file) decoded {
	t.Helper()
	data, err := render(f)
	if err != nil {
		t.Fatal(err)
	}
	var d decoded
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", f.name, err)
	}
	d.panelSources = map[string]string{}
	var walk func([]panelJSON)
	walk = func(panels []panelJSON) {
		for _, p := range panels {
			if p.Type != "row" {
				d.titles = append(d.titles, p.Title)
				d.panelSources[p.Title] = p.Datasource.UID
			}
			for _, tg := range p.Targets {
				tg.panel = p.Title
				d.targets = append(d.targets, tg)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return d
}

// substitute replaces Grafana's variables with values of their kind, as Grafana does before it sends a query.
var substitute = strings.NewReplacer(
	"${datasource}", "prometheus",
	"${cluster}", "cluster1",
	"$cluster", "cluster1",
	"$__rate_interval", "5m",
	"$__interval", "1m",
).Replace

var labelValues = regexp.MustCompile(`^label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)$`)

// metricNames lists the metric names an expression selects.
func metricNames(expr parser.Expr) []string {
	var names []string
	parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
		if vs, ok := node.(*parser.VectorSelector); ok {
			names = append(names, vs.Name)
		}
		return nil
	})
	return names
}

// documentedMetrics reads the metric names of docs/metrics.md's tables (rows "| `<name>` | ...").
func documentedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(metricsDoc)
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `([a-zA-Z_:][a-zA-Z0-9_:]*)`")
	names := map[string]bool{}
	for _, m := range row.FindAllStringSubmatch(string(data), -1) {
		names[m[1]] = true
	}
	if len(names) == 0 {
		t.Fatalf("%s lists no metrics", metricsDoc)
	}
	return names
}

// isDocumented tells whether name is documented, as itself or as a series of a documented histogram or summary
// (the docs name a histogram once; its series end in _bucket, _count, _sum).
func isDocumented(documented map[string]bool, name string) bool {
	if documented[name] {
		return true
	}
	for _, suffix := range []string{"_bucket", "_count", "_sum"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && documented[base] {
			return true
		}
	}
	return false
}
