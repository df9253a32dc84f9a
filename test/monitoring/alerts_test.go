// Package monitoring tests the product's alerts with Prometheus's own tool: promtool checks the rules and runs
// alerts_test.yaml, and every alert must have a case where it fires and one where it does not.
package monitoring

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/repo"
)

// alertsFile is the rule groups the chart ships in its PrometheusRule.
const alertsFile = "charts/cluster-proxy/files/alerts.yaml"

type ruleGroups struct {
	Groups []struct {
		Rules []struct {
			Alert string `json:"alert"`
		} `json:"rules"`
	} `json:"groups"`
}

type ruleTests struct {
	Tests []struct {
		AlertRuleTest []struct {
			Alertname string `json:"alertname"`
			ExpAlerts []any  `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

// promtool is Prometheus's promtool from the machine (make promtool installs Debian's prometheus package).
func promtool(t *testing.T, args ...string) {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool is not installed: run make promtool (Debian's prometheus package)")
	}
	cmd := exec.Command(path, args...)
	cmd.Dir = filepath.Join(repo.Root(), "test/monitoring")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %v: %v\n%s", args, err, out)
	}
}

func TestPromtoolAcceptsTheRules(t *testing.T) {
	promtool(t, "check", "rules", filepath.Join(repo.Root(), alertsFile))
}

func TestPromtoolRunsTheAlertTests(t *testing.T) {
	promtool(t, "test", "rules", "alerts_test.yaml")
}

func TestEveryAlertHasAFiringAndANotFiringCase(t *testing.T) {
	var groups ruleGroups
	read(t, filepath.Join(repo.Root(), alertsFile), &groups)
	var tests ruleTests
	read(t, filepath.Join(repo.Root(), "test/monitoring/alerts_test.yaml"), &tests)
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	alerts := 0
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts++
			if !fires[r.Alert] {
				t.Errorf("alert %s has no case in alerts_test.yaml where it fires", r.Alert)
			}
			if !quiet[r.Alert] {
				t.Errorf("alert %s has no case in alerts_test.yaml where it does not fire", r.Alert)
			}
		}
	}
	if alerts == 0 {
		t.Fatalf("%s holds no alert", alertsFile)
	}
}

func read(t *testing.T, path string, into any) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, into); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// updateKustomizeRule, set to 1, makes TestKustomizesPrometheusRuleHoldsTheAlerts write the PrometheusRule.
const updateKustomizeRule = "UPDATE_PROMETHEUS_RULE"

// TestKustomizesPrometheusRuleHoldsTheAlerts: config/prometheus ships the alerts of the chart, unchanged.
func TestKustomizesPrometheusRuleHoldsTheAlerts(t *testing.T) {
	var alerts map[string]any
	read(t, filepath.Join(repo.Root(), alertsFile), &alerts)
	want := map[string]any{
		"apiVersion": "monitoring.coreos.com/v1",
		"kind":       "PrometheusRule",
		"metadata":   map[string]any{"name": "cluster-proxy", "namespace": "system"},
		"spec":       map[string]any{"groups": alerts["groups"]},
	}
	path := filepath.Join(repo.Root(), "config/prometheus/prometheusrule.yaml")
	if os.Getenv(updateKustomizeRule) == "1" {
		out, err := yaml.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		header := "# Generated from charts/cluster-proxy/files/alerts.yaml: " + updateKustomizeRule + "=1 go test ./test/monitoring/\n"
		if err := os.WriteFile(path, append([]byte(header), out...), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var have map[string]any
	read(t, path, &have)
	if !reflect.DeepEqual(have, want) {
		t.Errorf("%s does not hold the alerts of %s: run %s=1 go test ./test/monitoring/", path, alertsFile, updateKustomizeRule)
	}
}
