package docs

import (
	"bufio"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/repo"
)

// alertsFile holds the product's Prometheus alerts, as rule groups.
const alertsFile = "charts/cluster-proxy/files/alerts.yaml"

// runbookURL is where an alert's runbook_url must point, followed by <alert>.md.
const runbookURL = "https://github.com/cluster-proxy-operator/cluster-proxy-operator/blob/main/docs/runbooks/"

// runbookSections are the sections of every runbook, in this order.
var runbookSections = []string{"## Meaning", "## Impact", "## Diagnosis", "## Mitigation"}

// severities are the values an alert's severity label may take.
var severities = []string{"critical", "warning", "info"}

type alertRule struct {
	Alert       string            `json:"alert"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

// alerts reads the alerting rules of alertsFile.
func alerts(t *testing.T) []alertRule {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repo.Root(), alertsFile))
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []struct {
			Rules []alertRule `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(b, &file); err != nil {
		t.Fatalf("%s: %v", alertsFile, err)
	}
	var out []alertRule
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				out = append(out, r)
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s holds no alert: the file is no longer read", alertsFile)
	}
	return out
}

// TestEveryAlertHasARunbook fails when an alert lacks a severity, a runbook_url of its own or a runbook page with the
// four sections and its severity, when the runbooks' index does not list it, or when a runbook has no alert.
func TestEveryAlertHasARunbook(t *testing.T) {
	dir := filepath.Join(repo.Root(), "docs", "runbooks")
	index, err := os.ReadFile(filepath.Join(dir, "README.md"))
	if err != nil {
		t.Fatalf("the runbooks' index: %v", err)
	}
	seen := map[string]bool{}
	for _, a := range alerts(t) {
		if seen[a.Alert] {
			t.Errorf("alert %s is defined twice", a.Alert)
		}
		seen[a.Alert] = true
		severity := a.Labels["severity"]
		if !slices.Contains(severities, severity) {
			t.Errorf("alert %s: label severity is %q, want one of %q", a.Alert, severity, severities)
		}
		if got, want := a.Annotations["runbook_url"], runbookURL+a.Alert+".md"; got != want {
			t.Errorf("alert %s: runbook_url is %q, want %q", a.Alert, got, want)
		}
		page := filepath.Join(dir, a.Alert+".md")
		if _, err := os.Stat(page); err != nil {
			t.Errorf("alert %s has no runbook: %v", a.Alert, err)
			continue
		}
		checkRunbook(t, page, a.Alert, severity)
		if !strings.Contains(string(index), "| `"+a.Alert+"` | "+severity+" |") ||
			!strings.Contains(string(index), "]("+a.Alert+".md)") {
			t.Errorf("docs/runbooks/README.md does not list alert %s with severity %s and a link to its runbook", a.Alert, severity)
		}
	}
	pages, err := filepath.Glob(filepath.Join(dir, "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, page := range pages {
		name := strings.TrimSuffix(filepath.Base(page), ".md")
		if name != "README" && !seen[name] {
			t.Errorf("docs/runbooks/%s.md is the runbook of no alert of %s", name, alertsFile)
		}
	}
}

// checkRunbook checks that page starts with "# <alert>", says "Severity: <severity>" and has the runbook sections,
// each once, in order, and none other.
func checkRunbook(t *testing.T, page, alert, severity string) {
	t.Helper()
	f, err := os.Open(page)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rel := "docs/runbooks/" + filepath.Base(page)
	var title, severityLine string
	var sections []string
	inBlock := false
	lines := bufio.NewScanner(f)
	for lines.Scan() {
		line := lines.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inBlock = !inBlock
			continue
		}
		switch {
		case inBlock:
		case title == "" && strings.TrimSpace(line) != "":
			title = line
		case strings.HasPrefix(line, "Severity:") && severityLine == "":
			severityLine = line
		case strings.HasPrefix(line, "## "):
			sections = append(sections, strings.TrimSpace(line))
		}
	}
	if err := lines.Err(); err != nil {
		t.Fatal(err)
	}
	if title != "# "+alert {
		t.Errorf("%s: first line is %q, want %q", rel, title, "# "+alert)
	}
	if want := "Severity: " + severity; strings.TrimSpace(severityLine) != want {
		t.Errorf("%s: severity line is %q, want %q (the alert's severity label)", rel, severityLine, want)
	}
	if !slices.Equal(sections, runbookSections) {
		t.Errorf("%s: sections are %q, want %q in this order", rel, sections, runbookSections)
	}
}
