//go:build bench

package dataplane

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/benchplot"
)

// figures is what a run measured, written as JSON to BENCH_OUT. A phase that did not run, or a mode that BENCH_MODES
// left out, is absent; the modes of a phase come in the order the phase runs them.
type figures struct {
	Date   string `json:"date"`
	NumCPU int    `json:"numCPU"`
	// OtherProcessesCPUPercent is how busy the machine's other processes kept it during the phases, in percent of one
	// core: the noise the figures were measured in.
	OtherProcessesCPUPercent float64              `json:"otherProcessesCPUPercent"`
	Phases                   []phaseFigures       `json:"phases,omitempty"`
	Bulk                     []bulkFigures        `json:"bulk,omitempty"`
	Latency                  []latencyFigures     `json:"latency,omitempty"`
	Concurrency              []concurrencyFigures `json:"concurrency,omitempty"`
	Streams                  *streamsFigures      `json:"streams,omitempty"`
	Upload                   []bulkFigures        `json:"upload,omitempty"`
	Exec                     []execFigures        `json:"exec,omitempty"`
}

type phaseFigures struct {
	Name                     string  `json:"name"`
	WallSeconds              float64 `json:"wallSeconds"`
	CPUSeconds               float64 `json:"cpuSeconds"`
	OtherProcessesCPUSeconds float64 `json:"otherProcessesCPUSeconds"`
}

type bulkFigures struct {
	Mode              string  `json:"mode"`
	MiBPerSecond      float64 `json:"mibPerSecond"` // median of the rounds
	CPUMillisPer64MiB float64 `json:"cpuMillisPer64MiB"`
}

type latencyFigures struct {
	Mode      string  `json:"mode"`
	P50Micros float64 `json:"p50Micros"`
	P99Micros float64 `json:"p99Micros"`
}

type concurrencyFigures struct {
	Mode                string  `json:"mode"`
	RequestsPerSecond   float64 `json:"requestsPerSecond"` // 64 clients
	CPUMicrosPerRequest float64 `json:"cpuMicrosPerRequest"`
}

type execFigures struct {
	Mode               string  `json:"mode"`
	Protocol           string  `json:"protocol"` // websocket or spdy
	Recorded           bool    `json:"recorded"`
	MiBPerSecond       float64 `json:"mibPerSecond"` // median of the rounds, until the recording is closed
	CPUMillisPer100MiB float64 `json:"cpuMillisPer100MiB"`
}

type streamsFigures struct {
	Streams          int   `json:"streams"`
	Errors           int64 `json:"errors"`
	GoroutinesBefore int   `json:"goroutinesBefore"`
	GoroutinesHeld   int   `json:"goroutinesHeld"`
	GoroutinesAfter  int   `json:"goroutinesAfter"`
	Settled          bool  `json:"settled"`
}

// finish adds what the summary holds once every phase has run: the phases' costs and the streams.
func (f *figures) finish(s summary) {
	var wall, other time.Duration
	for _, p := range s.phases {
		f.Phases = append(f.Phases, phaseFigures{Name: p.name, WallSeconds: p.cost.wall.Seconds(), CPUSeconds: p.cost.self.Seconds(),
			OtherProcessesCPUSeconds: p.cost.other.Seconds()})
		wall, other = wall+p.cost.wall, other+p.cost.other
	}
	if wall > 0 {
		f.OtherProcessesCPUPercent = 100 * other.Seconds() / wall.Seconds()
	}
	if r := s.streams; r != nil {
		f.Streams = &streamsFigures{Streams: 2 * streamsEach, Errors: r.errors(), GoroutinesBefore: r.goroutines[0],
			GoroutinesHeld: r.goroutines[1], GoroutinesAfter: r.goroutines[2], Settled: r.settled}
	}
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// plotNames are the modes' names on the plots, short enough for a legend or a bar group.
var plotNames = map[string]string{
	keyDirect:     "direct (loopback)",
	keyDirectPool: "direct, 64 conns",
	keyANP:        "raw ANP tunnel",
	keyANPPool:    "raw ANP, 64 tunnels",
	keyANPPerReq:  "ANP tunnel per request",
	keyANPPerRSA:  "the same, RSA-2048",
	keyOursRaw:    "our raw tunnel",
	keyFull:       "full path",
	keyAudited:    "full path, audited",
	keyLinks:      "links alone",
	keyHubUser:    "hub user, user-server",
	keyAggregated: "hub user, aggregated API",
}

func plotName(mode string) string {
	if n, ok := plotNames[mode]; ok {
		return n
	}
	return mode
}

// TestDataPlanePlots draws the plots again from the figures of an earlier run (BENCH_OUT), without measuring.
func TestDataPlanePlots(t *testing.T) {
	var f figures
	if err := benchplot.ReadFigures(figuresPath(), &f); err != nil {
		t.Fatalf("%v (make bench-data-plane writes them)", err)
	}
	writePlots(t, filepath.Dir(figuresPath()), f)
}

// figuresPath is BENCH_OUT, default bin/bench/dataplane.json.
func figuresPath() string { return benchplot.FiguresPath("dataplane.json") }

func writeFigures(t *testing.T, f figures) {
	out := figuresPath()
	if err := benchplot.WriteFigures(out, f); err != nil {
		t.Fatal(err)
	}
	t.Logf("figures written to %s", out)
	writePlots(t, filepath.Dir(out), f)
}

// writePlots draws the figures next to the JSON, a chart per phase that ran: dataplane-bulk.svg,
// dataplane-latency.svg, dataplane-concurrency.svg, dataplane-upload.svg and dataplane-exec.svg.
func writePlots(t *testing.T, dir string, f figures) {
	charts := map[string]benchplot.Chart{}
	if len(f.Bulk) > 0 {
		c := benchplot.Bar{Title: "Bulk: GET of 64 MiB over one kept-alive connection", YLabel: "MiB/s (median)"}
		for _, m := range f.Bulk {
			c.Names, c.Values = append(c.Names, plotName(m.Mode)), append(c.Values, m.MiBPerSecond)
		}
		charts["dataplane-bulk.svg"] = c
	}
	if len(f.Upload) > 0 {
		c := benchplot.Bar{Title: "Upload: POST of 64 MiB over one kept-alive connection", YLabel: "MiB/s (median)"}
		for _, m := range f.Upload {
			c.Names, c.Values = append(c.Names, plotName(m.Mode)), append(c.Values, m.MiBPerSecond)
		}
		charts["dataplane-upload.svg"] = c
	}
	if len(f.Latency) > 0 {
		c := benchplot.Bar{Title: "Latency: GET of 100 B one after the other", YLabel: "microseconds"}
		p50, p99 := benchplot.Series{Name: "p50"}, benchplot.Series{Name: "p99"}
		for _, m := range f.Latency {
			c.Names = append(c.Names, plotName(m.Mode))
			p50.Y, p99.Y = append(p50.Y, m.P50Micros), append(p99.Y, m.P99Micros)
		}
		c.Series = []benchplot.Series{p50, p99}
		charts["dataplane-latency.svg"] = c
	}
	if len(f.Concurrency) > 0 {
		c := benchplot.Bar{Title: "64 clients looping GET of 100 B", YLabel: "requests/s"}
		for _, m := range f.Concurrency {
			c.Names, c.Values = append(c.Names, plotName(m.Mode)), append(c.Values, m.RequestsPerSecond)
		}
		charts["dataplane-concurrency.svg"] = c
	}
	if len(f.Exec) > 0 {
		c := benchplot.Bar{Title: "Exec: 100 MiB of stdout through the full path", YLabel: "MiB/s (median)"}
		plain, recorded := benchplot.Series{Name: "not recorded"}, benchplot.Series{Name: "recorded"}
		for _, m := range f.Exec {
			if m.Recorded {
				recorded.Y = append(recorded.Y, m.MiBPerSecond)
				continue
			}
			c.Names, plain.Y = append(c.Names, m.Protocol), append(plain.Y, m.MiBPerSecond)
		}
		c.Series = []benchplot.Series{plain, recorded}
		charts["dataplane-exec.svg"] = c
	}
	names, err := benchplot.WriteFiles(dir, charts)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("plots written to %s: %s", dir, strings.Join(names, ", "))
}
