package localenv

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testenv"
)

const mpcYAML = `apiVersion: proxy.open-cluster-management.io/v1alpha1
kind: ManagedProxyConfiguration
metadata:
  name: cluster-proxy
`

func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestLoadSamplesReadsEveryDocumentInNameOrder(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"b.yaml":             "# leading comment\n---\n" + mpcYAML + "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: two\n---\n",
		"a.yml":              "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: one\n",
		"kustomization.yaml": "resources:\n  - b.yaml\n",
		"notes.txt":          "not yaml",
	})
	samples, err := loadSamples(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range samples {
		got = append(got, s.String())
	}
	want := "Namespace one, ManagedProxyConfiguration cluster-proxy, ConfigMap two"
	if strings.Join(got, ", ") != want {
		t.Errorf("samples = %q, want %q", strings.Join(got, ", "), want)
	}
}

func TestLoadSamplesRejectsBadInput(t *testing.T) {
	for name, files := range map[string]map[string]string{
		"no kind":     {"x.yaml": mpcYAML + "---\napiVersion: v1\nmetadata:\n  name: x\n"},
		"no MPC":      {"x.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n"},
		"no yaml":     {"x.txt": mpcYAML},
		"broken yaml": {"x.yaml": mpcYAML + "---\nkind: [\n"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := loadSamples(writeFiles(t, files)); err == nil {
				t.Error("loadSamples returned no error")
			}
		})
	}
}

func TestTailLinesKeepsTheLastLines(t *testing.T) {
	dir := writeFiles(t, map[string]string{"log": "1\n2\n3\n4\n5\n"})
	got, err := testenv.TailLines(filepath.Join(dir, "log"), 2)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, ",") != "4,5" {
		t.Errorf("TailLines = %v, want [4 5]", got)
	}
}

func TestPendingStateChangesOnlyWithThePendingSet(t *testing.T) {
	mpc := &proxyv1alpha1.ManagedProxyConfiguration{ObjectMeta: metav1.ObjectMeta{Generation: 2}}
	key, _ := pendingState(mpc, isReady(mpc))
	if key != "none" {
		t.Errorf("key without conditions = %q, want none", key)
	}
	cond := func(t string, s metav1.ConditionStatus, reason string) metav1.Condition {
		return metav1.Condition{Type: t, Status: s, Reason: reason, ObservedGeneration: 2}
	}
	mpc.Status.Conditions = []metav1.Condition{
		cond(proxyv1alpha1.ConditionReady, metav1.ConditionFalse, "Pending"),
		cond(proxyv1alpha1.ConditionSignerReady, metav1.ConditionFalse, "A"),
	}
	first, line := pendingState(mpc, isReady(mpc))
	if line != "waiting for SignerReady=False (A), Ready=False (Pending)" {
		t.Errorf("line = %q", line)
	}
	mpc.Status.Conditions[1].Reason = "B"
	if second, _ := pendingState(mpc, isReady(mpc)); second != first {
		t.Errorf("key changed with a reason only: %q -> %q", first, second)
	}
	mpc.Status.Conditions = []metav1.Condition{cond(proxyv1alpha1.ConditionReady, metav1.ConditionTrue, "AllComponentsReady")}
	mpc.Status.Conditions[0].ObservedGeneration = 1
	if isReady(mpc) {
		t.Error("Ready of an older generation counts as ready")
	}
}

func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{
		"/tmp/a-b_c.1/hub.kubeconfig": "/tmp/a-b_c.1/hub.kubeconfig",
		"/tmp/my dir/hub":             "'/tmp/my dir/hub'",
		"/tmp/it's":                   `'/tmp/it'\''s'`,
	} {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %q, want %q", in, got, want)
		}
	}
}
