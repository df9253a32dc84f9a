// Command dashboards writes the chart's Grafana dashboards (charts/cluster-proxy/files/dashboards/*.json) from Go
// code, so that their queries are reviewed as code and tested: every expression parses as PromQL and names only
// metrics of docs/metrics.md (see main_test.go). The chart's templates/monitoring.yaml renders each file as a
// ConfigMap for Grafana's dashboard sidecar.
//
// Run it after changing a dashboard: cd hack/dashboards && go run . (make dashboards).
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/variants"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/statetimeline"
	"github.com/grafana/grafana-foundation-sdk/go/table"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// defaultOut is the chart's folder of dashboards, relative to this folder (go run . runs here).
const defaultOut = "../../charts/cluster-proxy/files/dashboards"

// file is one dashboard and the name of the file it is written to.
type file struct {
	name  string
	build func() (dashboard.Dashboard, error)
}

// files lists every dashboard the program writes; the test compares the chart's folder with exactly these.
var files = []file{
	{name: "cluster-proxy-fleet.json", build: fleetDashboard},
	{name: "cluster-proxy-cluster.json", build: clusterDashboard},
}

func main() {
	out := flag.String("out", defaultOut, "folder to write the dashboards' JSON files to")
	flag.Parse()
	if err := write(*out); err != nil {
		fmt.Fprintln(os.Stderr, "dashboards:", err)
		os.Exit(1)
	}
}

// write renders every dashboard into dir.
func write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, f := range files {
		data, err := render(f)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, f.name), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// render builds a dashboard and encodes it as indented JSON with a final newline. HTML escaping is off so that
// PromQL's comparison operators stay readable in the files (<, > rather than \u003c, \u003e).
func render(f file) ([]byte, error) {
	d, err := f.build()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.name, err)
	}
	numberPanels(&d)
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(d); err != nil {
		return nil, fmt.Errorf("%s: %w", f.name, err)
	}
	return buf.Bytes(), nil
}

// numberPanels gives every panel and row an id, in order. The SDK leaves them unset, and Grafana would number them
// on load: fixed ids keep links to a panel (viewPanel=<id>) stable across releases as long as the order stays.
func numberPanels(d *dashboard.Dashboard) {
	var id uint32
	next := func() uint32 { id++; return id }
	for i := range d.Panels {
		if p := d.Panels[i].Panel; p != nil {
			n := next()
			p.Id = &n
		}
		if r := d.Panels[i].RowPanel; r != nil {
			r.Id = next()
			for j := range r.Panels {
				n := next()
				r.Panels[j].Id = &n
			}
		}
	}
}

// datasource is the data source of every panel and query: the dashboard's datasource variable, so that the same
// JSON works with whichever Prometheus the hub's Grafana has.
func datasource() common.DataSourceRef {
	return common.DataSourceRef{Type: ptr("prometheus"), Uid: ptr("${datasource}")}
}

// datasourceVariable lets the viewer pick the Prometheus that scrapes the hub.
func datasourceVariable() *dashboard.DatasourceVariableBuilder {
	return dashboard.NewDatasourceVariableBuilder("datasource").Label("Data source").Type("prometheus")
}

// The panels' constructors set the datasource variable on the panel as well as on its queries: Grafana runs a
// panel's queries with the panel's data source, and one left unset would mean the default data source.

func timeseriesPanel() *timeseries.PanelBuilder {
	return timeseries.NewPanelBuilder().Datasource(datasource())
}

// statPanel shows the last value: a stat of state (a count, a time left) is about now, not the range's mean.
func statPanel() *stat.PanelBuilder {
	return stat.NewPanelBuilder().Datasource(datasource()).
		ReduceOptions(common.NewReduceDataOptionsBuilder().Calcs([]string{"lastNotNull"}))
}

func tablePanel() *table.PanelBuilder {
	return table.NewPanelBuilder().Datasource(datasource())
}

func stateTimelinePanel() *statetimeline.PanelBuilder {
	return statetimeline.NewPanelBuilder().Datasource(datasource())
}

// query is a range query of the datasource variable, drawn with legend (Grafana's {{label}} templates).
func query(expr, legend string) *prometheus.DataqueryBuilder {
	return prometheus.NewDataqueryBuilder().Datasource(datasource()).Expr(expr).LegendFormat(legend).Range()
}

// tableQuery is an instant query whose series become a table's rows, one column a label.
func tableQuery(expr string) *prometheus.DataqueryBuilder {
	return prometheus.NewDataqueryBuilder().Datasource(datasource()).Expr(expr).
		Instant().Format(prometheus.PromQueryFormatTable)
}

// targets names the queries A, B, C... in order, as Grafana's editor would.
func targets(qs ...*prometheus.DataqueryBuilder) []cog.Builder[variants.Dataquery] {
	out := make([]cog.Builder[variants.Dataquery], 0, len(qs))
	for i, q := range qs {
		out = append(out, q.RefId(string(rune('A'+i))))
	}
	return out
}

// hideTableColumns is the organize transformation that drops a table query's Time and Value columns: the rows are
// the answer, the value (always 1) says nothing.
func hideTableColumns() dashboard.DataTransformerConfig {
	return dashboard.DataTransformerConfig{
		Id: "organize",
		Options: map[string]any{
			"excludeByName": map[string]bool{"Time": true, "Value": true},
		},
	}
}

// thresholds colours a value base below the first step, and each step's colour from its value on.
func thresholds(base string, steps ...dashboard.Threshold) *dashboard.ThresholdsConfigBuilder {
	all := append([]dashboard.Threshold{{Color: base}}, steps...)
	return dashboard.NewThresholdsConfigBuilder().Mode(dashboard.ThresholdsModeAbsolute).Steps(all)
}

// step is a threshold from value on.
func step(value float64, color string) dashboard.Threshold {
	return dashboard.Threshold{Value: &value, Color: color}
}

// valueText maps exact values to a text and colour (the stat of a condition: 1 True, 0 not).
func valueText(texts map[string]dashboard.ValueMappingResult) []dashboard.ValueMapping {
	return []dashboard.ValueMapping{{ValueMap: &dashboard.ValueMap{Type: dashboard.MappingTypeValueToText, Options: texts}}}
}

func result(text, color string) dashboard.ValueMappingResult {
	return dashboard.ValueMappingResult{Text: ptr(text), Color: ptr(color)}
}

func ptr[T any](v T) *T { return &v }
