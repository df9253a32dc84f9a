// Package docs checks that the commands the README and docs/ give users are the ones the tests and CI run.
package docs

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/repo"
)

// runBy says where a documented command is run: file (from the repository root) contains text, the command as
// that file runs it. A command no test can run here names why in notRunHere instead.
type runBy struct {
	file, text string
	notRunHere string
}

// exercised maps every command of a shell block in README.md and docs/*.md, as commandsOf normalizes it, to where
// it is run.
var exercised = map[string][]runBy{
	"kubectl cluster-proxy sessions list --dir /mnt/sessions --cluster cluster1": {
		{file: "test/e2e/records_test.go", text: `plugin("sessions", "list", "--dir", rec.sessionsDir, "--cluster", cluster`}},
	"kubectl cluster-proxy sessions play <session> --dir /mnt/sessions --speed 2": {
		{file: "test/e2e/records_test.go", text: `plugin("sessions", "play", id, "--dir", rec.sessionsDir)`},
		{file: "cmd/kubectl-cluster_proxy/sessions_test.go", text: `[]string{"S2", "--dir", dir, "--speed", "0"}`}},
	"kubectl get secret -n open-cluster-management-addon cluster-proxy-signer -o jsonpath='{.data.ca\\.crt}' | base64 -d | openssl x509 -noout -fingerprint -sha256": {
		{file: "test/e2e-migrate/migrate_test.go", text: "const caFingerprintCommand = `kubectl get secret -n open-cluster-management-addon cluster-proxy-signer -o jsonpath='{.data.ca\\.crt}' | base64 -d | openssl x509 -noout -fingerprint -sha256`"}},
	"kubectl apply --server-side --force-conflicts -f charts/cluster-proxy/crds/": {
		{file: "test/e2e-migrate/migrate_test.go", text: `shell("kubectl apply --server-side --force-conflicts -f charts/cluster-proxy/crds/")`}},
	"kubectl delete deployment -n open-cluster-management-addon cluster-proxy-addon-manager": {
		{file: "test/e2e-migrate/migrate_test.go", text: `shell("kubectl delete deployment -n open-cluster-management-addon cluster-proxy-addon-manager")`}},
	"helm upgrade -n open-cluster-management-addon cluster-proxy charts/cluster-proxy -f addon-values.yaml": {
		{file: "test/e2e-migrate/migrate_test.go", text: `"upgrade", "-n", localsystem.Namespace, "cluster-proxy", filepath.Join(repo.Root(), "charts", "cluster-proxy"), "-f", addOnValuesFile()`}},
	"kubectl wait managedproxyconfiguration cluster-proxy --for=condition=Ready --timeout=5m": {
		{file: "test/e2e-migrate/migrate_test.go", text: `shell("kubectl wait managedproxyconfiguration cluster-proxy --for=condition=Ready --timeout=5m")`}},
	"kubectl delete deployment --cascade=foreground -n open-cluster-management-addon cluster-proxy-addon-manager cluster-proxy": {
		{file: "test/e2e-migrate/migrate_test.go", text: `shell("kubectl delete deployment --cascade=foreground -n open-cluster-management-addon cluster-proxy-addon-manager cluster-proxy")`}},
	"kubectl delete -n open-cluster-management-addon serviceaccount/cluster-proxy service/cluster-proxy-addon-user service/proxy-entrypoint": {
		{file: "test/e2e-migrate/migrate_test.go", text: `shell("kubectl delete -n open-cluster-management-addon serviceaccount/cluster-proxy service/cluster-proxy-addon-user service/proxy-entrypoint")`}},
	"helm rollback -n open-cluster-management-addon cluster-proxy 1": {
		{file: "test/e2e-migrate/migrate_test.go", text: `"rollback", "-n", localsystem.Namespace, "cluster-proxy", "1"`}},
	"helm upgrade --install -n open-cluster-management-addon --create-namespace cluster-proxy charts/cluster-proxy --set monitoring.enabled=true --set monitoring.labels.release=kube-prometheus-stack": {
		{file: "test/helm/monitoring_test.go", text: `"upgrade", "--install", "-n", namespace, "--create-namespace", releaseName, chartDir(),
		"--set", "monitoring.enabled=true", "--set", "monitoring.labels.release=kube-prometheus-stack"`}},
	"kustomize build config/prometheus | kubectl apply --server-side -f -": {
		{notRunHere: "needs the prometheus-operator's CRDs, which no module served here ships; test/kustomize builds config/prometheus and checks what it selects"}},
	"make run": {{file: "cmd/localsystem/main_test.go", text: `exec.Command(bin)`}, // make run's program, by make e2e
		{file: "Makefile", text: "$(BIN_DIR)/localsystem"}},
	"make test": {{file: ".ci/run", text: "step test"}},
	"helm install -n open-cluster-management-addon --create-namespace cluster-proxy charts/cluster-proxy --set proxyServer.entrypointAddress=proxy.example.com": {
		{file: "test/helm/helm_test.go", text: `"--create-namespace", releaseName, chartDir(), "--set", "proxyServer.entrypointAddress=proxy.example.com"`}},
	"kustomize build config/default | kubectl apply --server-side -f -": {
		{file: "test/kustomize/kustomize_test.go", text: "kustomize build config/default | kubectl apply --server-side -f -"}},
	"make bundle": {{file: "Makefile", text: "verify-generated: manifests generate bundle"}, {file: ".ci/run", text: "step verify-generated"}},
	"docker build -f bundle.Dockerfile -t <registry>/cluster-proxy-operator-bundle:<tag> .": {
		{notRunHere: "needs a Docker engine; test/bundle checks bundle.Dockerfile's labels against bundle/metadata"}},
	"kubectl annotate managedproxyconfiguration cluster-proxy proxy.open-cluster-management.io/rotate-ca=\"$(date +%s)\" --overwrite": {
		{file: "test/e2e/rotation_test.go", text: `kubectl annotate managedproxyconfiguration cluster-proxy proxy.open-cluster-management.io/rotate-ca="$(date +%s)" --overwrite`}},
	"make docker-build IMG=<registry>/cluster-proxy-operator:<tag>": {
		{notRunHere: "needs a Docker engine; its build step, make build-static, runs in test/image"}},
	"make image IMG=<registry>/cluster-proxy-operator:<tag>": {
		{file: "test/image/tarball_test.go", text: `"make", "--no-print-directory", "image", "BIN_DIR="+bin, "IMAGE_TAR="+path, "IMG="+tag`}},
	"make image-push IMAGE=<registry>/cluster-proxy-operator:v$(cat VERSION)": {
		{file: "test/image/index_test.go", text: `"image-push", "BIN_DIR=" + bin, "IMAGE=" + ref`}},
	"make image-index": {{file: "test/image/index_test.go", text: `"image-index", "BIN_DIR=" + bin`}},
	"ctr -n k8s.io images import bin/image.tar": {
		{file: "internal/localsystem/realcluster/images.go", text: `"images", "import"`}},
	"helm uninstall -n open-cluster-management-addon cluster-proxy": {
		{file: "test/helm/helm_test.go", text: `helm("uninstall", "-n", namespace, releaseName)`},
		{file: "test/e2e/uninstall_test.go", text: `"uninstall", "-n", localsystem.Namespace, "cluster-proxy"`}},
	"kubectl delete secret -n open-cluster-management-addon cluster-proxy-signer": {
		{file: "test/e2e/uninstall_test.go", text: `shell("kubectl delete secret -n open-cluster-management-addon cluster-proxy-signer")`}},
	// docs/backup-restore.md: a backup and restore of a live hub's objects. What the restore relies on (the kept signer
	// Secret signs on, untouched) is proven by the controllers suite's "The signer CA survives its configuration
	// deleted and created again".
	"kubectl get secret -n open-cluster-management-addon cluster-proxy-signer -o json | jq -f strip.jq > cluster-proxy-signer.json": {
		{notRunHere: backupNotRun}},
	"kubectl get managedproxyconfigurations,proxycertificates -A -o json | jq -f strip.jq > proxy-objects.json": {
		{notRunHere: backupNotRun}},
	"kubectl get addondeploymentconfigs,placements,managedclustersetbindings -A -o json | jq -f strip.jq > addon-objects.json": {
		{notRunHere: backupNotRun}},
	"kubectl get clustermanagementaddon cluster-proxy -o jsonpath='{.spec.installStrategy}' > install-strategy.json": {
		{notRunHere: backupNotRun}},
	"kubectl create namespace open-cluster-management-addon": {{notRunHere: backupNotRun}},
	"kubectl apply -f cluster-proxy-signer.json":             {{notRunHere: backupNotRun}},
	"kubectl apply -f addon-objects.json":                    {{notRunHere: backupNotRun}},
	"kubectl apply -f proxy-objects.json":                    {{notRunHere: backupNotRun}},
	"kubectl patch clustermanagementaddon cluster-proxy --type=merge -p \"{\\\"spec\\\":{\\\"installStrategy\\\":$(cat install-strategy.json)}}\"": {
		{notRunHere: backupNotRun}},
	"kubectl-cluster_proxy kubeconfig cluster1 -o cluster1.kubeconfig --token \"$TOKEN\"": {
		{file: "test/e2e/helpers_test.go", text: `plugin("kubeconfig", cluster, "-o", path, "--token", tok)`}},
	"kubectl get clusters.gateway.proxy.open-cluster-management.io": {
		{file: "test/e2e/hubaccess_test.go", text: `kubeclient.Kubectl(sys.Hub.Kubeconfig, "get", "clusters."+gatewayGroup)`}},
	"kubectl get --raw /apis/gateway.proxy.open-cluster-management.io/v1alpha1/clusters/cluster1/proxy/api/v1/namespaces": {
		{file: "test/e2e/hubaccess_test.go", text: `kubeclient.Kubectl(sys.Hub.Kubeconfig, "get", "--raw", proxyPath(cluster, "/api/v1/namespaces"))`}},
	"kubectl-cluster_proxy kubeconfig cluster1 --via-hub -o cluster1-via-hub.kubeconfig": {
		{file: "test/e2e/helpers_test.go", text: `plugin("kubeconfig", cluster, "--via-hub", "-o", path, "--kubeconfig", hub)`}},
	"kubectl --kubeconfig cluster1-via-hub.kubeconfig get pods -A": {
		{file: "test/e2e/hubaccess_test.go", text: `kubeclient.Kubectl(kc, "get", "pods", "-A")`}},
	"kubectl --kubeconfig cluster1.kubeconfig get namespaces": {
		{file: "test/e2e/clients_test.go", text: `kubeclient.Kubectl(viewer, "get", "namespaces"`}},
	"curl --proxytunnel -x https://proxy-entrypoint.<ns>.svc:8094 --proxy-cacert ca.crt --proxy-cert tls.crt --proxy-key tls.key -k https://<cluster>:443/healthz": {
		{file: "test/e2e/helpers_test.go", text: `"--proxy-cacert", ca, "--proxy-cert", cert, "--proxy-key", key,`}},
	"kubectl get managedproxyconfiguration cluster-proxy -o yaml": {
		{file: "test/e2e/install_test.go", text: `shell("kubectl get managedproxyconfiguration cluster-proxy -o yaml")`}},
	"kubectl get clusterproxystatuses -A": {{file: "test/e2e/install_test.go", text: `shell("kubectl get clusterproxystatuses -A")`}},
	"kubectl get proxycertificates -A":    {{file: "test/e2e/install_test.go", text: `shell("kubectl get proxycertificates -A")`}},
	"kubectl-cluster_proxy health":        {{file: "test/e2e/install_test.go", text: `plugin("health")`}},
	"opm init cluster-proxy-operator --default-channel=stable --output=yaml": {
		{file: "internal/localsystem/olm/catalog.go", text: `opmRun(ctx, opm, home, "init", Package, "--default-channel="+Channel, "--output=yaml")`}},
	"opm render <registry>/cluster-proxy-operator-bundle:v0.1.0 --output=yaml": {
		{file: "internal/localsystem/olm/catalog.go", text: `opmRun(ctx, opm, home, "render", cat.Bundles[r.Version], "--use-http", "--output=yaml")`}},
	"opm validate catalog": {{file: "internal/localsystem/olm/catalog.go", text: `opmRun(ctx, opm, home, "validate", cat.Dir)`}},
	"kubectl get packagemanifests cluster-proxy-operator": {
		{file: "test/e2e-olm/olm_test.go", text: `kubeclient.Kubectl(sys.Hub.Kubeconfig, "get", "packagemanifests", olm.Package,`}},
}

// backupNotRun is why docs/backup-restore.md's backup and restore commands are not run here.
const backupNotRun = "no suite backs up and restores a whole hub yet; the controllers suite proves that the kept signer Secret signs on"

// TestEveryDocumentedCommandIsRun fails when the README or a page of docs/ gives a command that no test or CI step
// runs (and no reason why it cannot run here), when a test stops running one, or when the table keeps a command the
// docs no longer give.
func TestEveryDocumentedCommandIsRun(t *testing.T) {
	root := repo.Root()
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]string{}
	for _, page := range append([]string{filepath.Join(root, "README.md")}, pages...) {
		rel, _ := filepath.Rel(root, page)
		for _, c := range commandsOf(t, page) {
			documented[c] = rel
		}
	}
	if len(documented) == 0 {
		t.Fatal("found no command in the README or docs/: the shell blocks are no longer read")
	}
	sources := map[string]string{}
	for command, page := range documented {
		where, ok := exercised[command]
		if !ok {
			t.Errorf("%s gives %q, which no test runs: run it in a test and add it to exercised", page, command)
			continue
		}
		for _, w := range where {
			if w.notRunHere != "" {
				continue
			}
			src, ok := sources[w.file]
			if !ok {
				b, err := os.ReadFile(filepath.Join(root, w.file))
				if err != nil {
					t.Fatalf("%q: %v", command, err)
				}
				src = string(b)
				sources[w.file] = src
			}
			if !strings.Contains(src, w.text) {
				t.Errorf("%s gives %q, but %s no longer runs it (no %q)", page, command, w.file, w.text)
			}
		}
	}
	for command := range exercised {
		if _, ok := documented[command]; !ok {
			t.Errorf("exercised lists %q, which neither the README nor docs/ gives any more", command)
		}
	}
}

// commandsOf returns the commands of the shell blocks (```sh, ```bash, ```shell) of a Markdown page: continued lines
// joined, comments and blank lines dropped, spaces collapsed.
func commandsOf(t *testing.T, page string) []string {
	t.Helper()
	f, err := os.Open(page)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var commands []string
	inShell, inBlock := false, false
	pending := ""
	lines := bufio.NewScanner(f)
	for lines.Scan() {
		line := lines.Text()
		if fence := strings.TrimSpace(line); strings.HasPrefix(fence, "```") {
			if !inBlock {
				lang := strings.TrimPrefix(fence, "```")
				inShell = lang == "sh" || lang == "bash" || lang == "shell"
			}
			inBlock = !inBlock
			continue
		}
		if !inBlock || !inShell {
			continue
		}
		line = strings.TrimSpace(withoutComment(line))
		if continued, ok := strings.CutSuffix(line, `\`); ok {
			pending += continued + " "
			continue
		}
		if c := strings.Join(strings.Fields(pending+line), " "); c != "" {
			commands = append(commands, c)
		}
		pending = ""
	}
	if err := lines.Err(); err != nil {
		t.Fatal(err)
	}
	return commands
}

// withoutComment cuts a shell comment: a # at the start of the line or after a blank, outside quotes.
func withoutComment(line string) string {
	var quote rune
	for i, r := range line {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '"' || r == '\'':
			quote = r
		case r == '#' && (i == 0 || line[i-1] == ' ' || line[i-1] == '\t'):
			return line[:i]
		}
	}
	return line
}
