// Package metricsdoc keeps docs/metrics.md true to the programs: each program's test describes the registry its
// /metrics serves, and the table of that program in docs/metrics.md must list exactly those metrics, with their
// labels and help. A metric added, renamed or relabelled fails the test until the table is written again
// (UPDATE_METRICS_DOC=1 go test ./cmd/...).
package metricsdoc

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/repo"
)

// Path is the reference, relative to the repository's root.
const Path = "docs/metrics.md"

// UpdateEnv, set to 1, makes Check write the table instead of comparing it.
const UpdateEnv = "UPDATE_METRICS_DOC"

// Metric is one registered metric as the reference lists it.
type Metric struct {
	Name   string
	Labels []string
	Help   string
}

// descPattern reads a descriptor's String(), the only way client_golang shows a Desc's name, help and labels.
var descPattern = regexp.MustCompile(`^Desc\{fqName: ("(?:[^"\\]|\\.)*"), help: ("(?:[^"\\]|\\.)*"), unit: "(?:[^"\\]|\\.)*", constLabels: \{([^}]*)\}, variableLabels: \{([^}]*)\}\}$`)

// Described lists what d describes, by name. A descriptor client_golang could not build (its error is in the
// String) fails the parse.
func Described(d interface{ Describe(chan<- *prometheus.Desc) }) ([]Metric, error) {
	ch := make(chan *prometheus.Desc)
	go func() {
		d.Describe(ch)
		close(ch)
	}()
	byName := map[string]Metric{}
	var errs []string
	for desc := range ch {
		m := descPattern.FindStringSubmatch(desc.String())
		if m == nil {
			errs = append(errs, desc.String())
			continue
		}
		name, err1 := strconv.Unquote(m[1])
		help, err2 := strconv.Unquote(m[2])
		if err1 != nil || err2 != nil {
			errs = append(errs, desc.String())
			continue
		}
		var labels []string
		for _, l := range strings.Split(m[4], ",") {
			if l = strings.TrimSuffix(strings.TrimPrefix(l, "c("), ")"); l != "" {
				labels = append(labels, l)
			}
		}
		for _, l := range strings.Split(m[3], ",") {
			if k, _, ok := strings.Cut(l, "="); ok {
				labels = append(labels, k)
			}
		}
		slices.Sort(labels)
		byName[name] = Metric{Name: name, Labels: labels, Help: help}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("unreadable descriptors: %s", strings.Join(errs, "; "))
	}
	out := make([]Metric, 0, len(byName))
	for _, m := range byName {
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b Metric) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Table renders metrics as the reference's Markdown table; the Go runtime's and the process's (go_*, process_*, the
// same in every Go program) follow in a folded table of their own.
func Table(metrics []Metric) string {
	var own, runtime []Metric
	for _, m := range metrics {
		if strings.HasPrefix(m.Name, "go_") || strings.HasPrefix(m.Name, "process_") {
			runtime = append(runtime, m)
		} else {
			own = append(own, m)
		}
	}
	var b strings.Builder
	rows(&b, own)
	if len(runtime) > 0 {
		fmt.Fprintf(&b, "\n<details><summary>The Go runtime's and the process's metrics (%d)</summary>\n\n", len(runtime))
		rows(&b, runtime)
		b.WriteString("\n</details>\n")
	}
	return b.String()
}

func rows(b *strings.Builder, metrics []Metric) {
	b.WriteString("| metric | labels | meaning |\n|---|---|---|\n")
	for _, m := range metrics {
		labels := make([]string, len(m.Labels))
		for i, l := range m.Labels {
			labels[i] = "`" + l + "`"
		}
		help := strings.ReplaceAll(strings.Join(strings.Fields(m.Help), " "), "|", `\|`)
		fmt.Fprintf(b, "| `%s` | %s | %s |\n", m.Name, strings.Join(labels, ", "), help)
	}
}

func markers(program string) (begin, end string) {
	return "<!-- metrics of " + program + ": generated, begin -->\n", "<!-- metrics of " + program + ": generated, end -->"
}

// Section is the table of program in doc, false when its markers are missing.
func Section(doc, program string) (string, bool) {
	begin, end := markers(program)
	i := strings.Index(doc, begin)
	j := strings.Index(doc, end)
	if i < 0 || j < i {
		return "", false
	}
	return doc[i+len(begin) : j], true
}

// Check fails t unless program's table in docs/metrics.md lists exactly what d describes; with UPDATE_METRICS_DOC=1
// it writes the table.
func Check(t *testing.T, program string, d interface{ Describe(chan<- *prometheus.Desc) }) {
	t.Helper()
	metrics, err := Described(d)
	if err != nil {
		t.Fatal(err)
	}
	if len(metrics) == 0 {
		t.Fatalf("%s registers no metric: the test describes the wrong registry", program)
	}
	path := filepath.Join(repo.Root(), Path)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	have, ok := Section(doc, program)
	want := Table(metrics)
	begin, _ := markers(program)
	switch {
	case !ok:
		t.Fatalf("%s has no table of %s: add the lines %q and its end marker", Path, program, begin)
	case have == want:
	case os.Getenv(UpdateEnv) == "1":
		i := strings.Index(doc, begin) + len(begin)
		doc = doc[:i] + want + doc[i+len(have):]
		if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	default:
		t.Errorf("%s's table of %s is not what %s serves: run %s=1 go test ./cmd/... and commit it\n%s", Path, program,
			program, UpdateEnv, diff(have, want))
	}
}

// diff names the rows only one side has.
func diff(have, want string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	h, w := in(have), in(want)
	var b strings.Builder
	for _, l := range strings.Split(want, "\n") {
		if !h[l] {
			b.WriteString("+ " + l + "\n")
		}
	}
	for _, l := range strings.Split(have, "\n") {
		if !w[l] {
			b.WriteString("- " + l + "\n")
		}
	}
	return b.String()
}
