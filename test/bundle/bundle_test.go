// Package bundle tests the OLM bundle in bundle/: it is what 'make bundle' generates from config/ today, it passes
// the operator-framework validators 'operator-sdk bundle validate' runs (default and OperatorHub suites), and its
// parts agree with each other (owned CRDs, alm-examples, annotations and bundle.Dockerfile labels).
package bundle

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/operator-framework/api/pkg/manifests"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	"github.com/operator-framework/api/pkg/validation"
	"sigs.k8s.io/yaml"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/repo"
)

// TestBundleIsFresh regenerates the bundle into a temporary folder and compares it file by file with bundle/ and
// bundle.Dockerfile: a change to config/ without 'make bundle' fails here.
func TestBundleIsFresh(t *testing.T) {
	root := repo.Root()
	tmp := t.TempDir()
	cmd := exec.Command("go", "run", "./hack/bundle", "-out", filepath.Join(tmp, "bundle"),
		"-dockerfile", filepath.Join(tmp, "bundle.Dockerfile"))
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go run ./hack/bundle: %v\n%s", err, out)
	}
	want := listFiles(t, filepath.Join(tmp, "bundle"))
	got := listFiles(t, filepath.Join(root, "bundle"))
	if strings.Join(want, "\n") != strings.Join(got, "\n") {
		t.Fatalf("bundle/ is stale (run 'make bundle'): files %v, generated %v", got, want)
	}
	for _, f := range append(want, "../bundle.Dockerfile") {
		w, err := os.ReadFile(filepath.Join(tmp, "bundle", f))
		if err != nil {
			t.Fatal(err)
		}
		g, err := os.ReadFile(filepath.Join(root, "bundle", f))
		if err != nil {
			t.Fatal(err)
		}
		if string(w) != string(g) {
			t.Errorf("bundle/%s is stale: run 'make bundle'", f)
		}
	}
}

func listFiles(t *testing.T, dir string) []string {
	t.Helper()
	var files []string
	err := filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		files = append(files, filepath.ToSlash(rel))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	return files
}

// TestBundleValidators runs the validators of 'operator-sdk bundle validate' (CSV, CRD, bundle) and the
// OperatorHub ones (icon, maintainers, links, categories, capabilities, minKubeVersion) plus the good-practices
// suite on the bundle as OLM loads it. Errors and warnings both fail.
func TestBundleValidators(t *testing.T) {
	bundle, err := manifests.GetBundleFromDir(filepath.Join(repo.Root(), "bundle"))
	if err != nil {
		t.Fatalf("load bundle: %v", err)
	}
	if bundle.CSV == nil || len(bundle.V1CRDs) != 3 {
		t.Fatalf("bundle: CSV %v, %d v1 CRDs; want a CSV and 3 CRDs", bundle.CSV != nil, len(bundle.V1CRDs))
	}
	validators := validation.DefaultBundleValidators.WithValidators(
		validation.OperatorHubV2Validator,
		validation.StandardCategoriesValidator,
		validation.StandardCapabilitiesValidator,
		validation.GoodPracticesValidator,
		validation.ObjectValidator,
		validation.AlphaDeprecatedAPIsValidator,
	)
	results := validators.Validate(bundle.ObjectsToValidate()...)
	excused := versionlessRuleWarnings(t, bundle.CSV)
	n := 0
	for _, r := range results {
		for _, e := range r.Errors {
			n++
			t.Errorf("%s: %s", r.Name, e)
		}
		for _, w := range r.Warnings {
			if msg := strings.TrimSuffix(w.Error(), ","); slices.ContainsFunc(excused, func(end string) bool { return strings.HasSuffix(msg, end) }) {
				t.Logf("%s: expected warning: %s", r.Name, w)
				continue
			}
			n++
			t.Errorf("%s: warning: %s", r.Name, w)
		}
	}
	if len(results) == 0 {
		t.Fatal("the validators returned no results")
	}
	t.Logf("%d validator results, %d problems", len(results), n)

	// The validators have teeth: without one owned CRD (an error) and without the icon (a warning) the same bundle fails.
	broken, err := manifests.GetBundleFromDir(filepath.Join(repo.Root(), "bundle"))
	if err != nil {
		t.Fatal(err)
	}
	broken.V1CRDs = broken.V1CRDs[1:]
	broken.CSV.Spec.Icon = nil
	errs, warns := 0, 0
	for _, r := range validators.Validate(broken.ObjectsToValidate()...) {
		errs += len(r.Errors)
		warns += len(r.Warnings)
	}
	if errs < 1 || errs+warns < 2 {
		t.Errorf("a bundle missing a CRD and the icon had %d errors and %d warnings; want an error and a warning at least", errs, warns)
	}
}

// TestBundleConsistency checks what the validators do not: install modes, owned CRDs against the CRD files,
// no required CRDs, alm-examples against owned kinds, permissions, and annotations.yaml against the
// bundle.Dockerfile labels.
func TestBundleConsistency(t *testing.T) {
	root := repo.Root()
	var csv operatorsv1alpha1.ClusterServiceVersion
	readYAML(t, filepath.Join(root, "bundle", "manifests", "cluster-proxy-operator.clusterserviceversion.yaml"), &csv)

	if csv.Name != "cluster-proxy-operator.v0.1.0" || csv.Spec.Version.String() != "0.1.0" {
		t.Errorf("CSV %s version %s; want cluster-proxy-operator.v0.1.0 version 0.1.0", csv.Name, csv.Spec.Version.String())
	}
	modes := map[operatorsv1alpha1.InstallModeType]bool{}
	for _, m := range csv.Spec.InstallModes {
		modes[m.Type] = m.Supported
	}
	wantModes := map[operatorsv1alpha1.InstallModeType]bool{
		operatorsv1alpha1.InstallModeTypeOwnNamespace: false, operatorsv1alpha1.InstallModeTypeSingleNamespace: false,
		operatorsv1alpha1.InstallModeTypeMultiNamespace: false, operatorsv1alpha1.InstallModeTypeAllNamespaces: true,
	}
	if len(modes) != 4 {
		t.Errorf("install modes %v; want all four", csv.Spec.InstallModes)
	}
	for k, v := range wantModes {
		if got, ok := modes[k]; !ok || got != v {
			t.Errorf("install mode %s supported=%v; want %v", k, got, v)
		}
	}
	if csv.Spec.MinKubeVersion == "" || len(csv.Spec.Keywords) == 0 || len(csv.Spec.Icon) != 1 ||
		len(csv.Spec.Maintainers) == 0 || len(csv.Spec.Links) == 0 {
		t.Errorf("CSV lacks minKubeVersion, keywords, icon, maintainers or links")
	}

	// Owned CRDs: each CRD file in manifests/ is owned with every served version and its kind, with a description.
	owned := map[string]operatorsv1alpha1.CRDDescription{}
	for _, d := range csv.Spec.CustomResourceDefinitions.Owned {
		if d.Description == "" || d.DisplayName == "" {
			t.Errorf("owned %s has no description or displayName", d.Name)
		}
		owned[d.Name+"/"+d.Version] = d
	}
	crdFiles, _ := filepath.Glob(filepath.Join(root, "bundle", "manifests", "*_*.yaml"))
	ownedKinds := map[string]bool{}
	seen := 0
	for _, f := range crdFiles {
		var crd struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
			Spec struct {
				Group string `json:"group"`
				Names struct {
					Kind string `json:"kind"`
				} `json:"names"`
				Versions []struct {
					Name   string `json:"name"`
					Served bool   `json:"served"`
				} `json:"versions"`
			} `json:"spec"`
		}
		readYAML(t, f, &crd)
		if crd.Kind != "CustomResourceDefinition" {
			continue
		}
		for _, v := range crd.Spec.Versions {
			if !v.Served {
				continue
			}
			d, ok := owned[crd.Metadata.Name+"/"+v.Name]
			if !ok {
				t.Errorf("%s %s is in manifests/ but not owned by the CSV", crd.Metadata.Name, v.Name)
				continue
			}
			seen++
			if d.Kind != crd.Spec.Names.Kind {
				t.Errorf("owned %s kind %s; the CRD says %s", d.Name, d.Kind, crd.Spec.Names.Kind)
			}
			ownedKinds[crd.Spec.Group+"/"+v.Name+"/"+d.Kind] = true
		}
	}
	if seen != len(owned) || seen != 3 {
		t.Errorf("%d owned CRD versions, %d matched CRD files; want 3 and 3", len(owned), seen)
	}

	// OCM's hub APIs are not required: OCM's cluster-manager creates them and no CSV owns them, so OLM's resolver
	// would refuse a bundle that requires them (constraints not satisfiable) on every OCM hub.
	if r := csv.Spec.CustomResourceDefinitions.Required; len(r) > 0 {
		t.Errorf("the CSV requires %d CRDs (%s, ...), which no OLM bundle provides on an OCM hub", len(r), r[0].Name)
	}

	// alm-examples: valid JSON, every example of an owned kind, every owned kind with an example.
	var examples []struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name string `json:"name"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal([]byte(csv.Annotations["alm-examples"]), &examples); err != nil {
		t.Fatalf("alm-examples: %v", err)
	}
	exampleKinds := map[string]bool{}
	for _, e := range examples {
		k := e.APIVersion + "/" + e.Kind
		if !ownedKinds[k] || e.Metadata.Name == "" {
			t.Errorf("alm-example %s %q is not of an owned kind or has no name", k, e.Metadata.Name)
		}
		exampleKinds[e.Kind] = true
	}
	for _, k := range []string{"ManagedProxyConfiguration", "ProxyCertificate"} {
		if !exampleKinds[k] {
			t.Errorf("alm-examples has no %s", k)
		}
	}

	// Install strategy: the manager Deployment with its service account holding the cluster permissions, and in its
	// namespace the manager's Role and the leader election's.
	strategy := csv.Spec.InstallStrategy.StrategySpec
	if len(strategy.DeploymentSpecs) != 1 {
		t.Fatalf("%d deployments; want 1", len(strategy.DeploymentSpecs))
	}
	sa := strategy.DeploymentSpecs[0].Spec.Template.Spec.ServiceAccountName
	if len(strategy.ClusterPermissions) != 1 || strategy.ClusterPermissions[0].ServiceAccountName != sa ||
		len(strategy.ClusterPermissions[0].Rules) == 0 {
		t.Errorf("clusterPermissions %+v; want the ClusterRole rules for %s", strategy.ClusterPermissions, sa)
	}
	leases := false
	for _, p := range strategy.Permissions {
		for _, r := range p.Rules {
			for _, res := range r.Resources {
				leases = leases || (res == "leases" && p.ServiceAccountName == sa)
			}
		}
	}
	if !leases {
		t.Errorf("permissions %+v; want the leader-election Role (leases) for %s", strategy.Permissions, sa)
	}
	// What the manager writes in the proxy-servers' namespace is granted there, never cluster-wide.
	for _, p := range strategy.ClusterPermissions {
		for _, r := range p.Rules {
			for _, res := range r.Resources {
				if slices.Contains([]string{"secrets", "services", "serviceaccounts", "deployments", "roles", "rolebindings",
					"networkpolicies", "pods/portforward"}, res) {
					t.Errorf("clusterPermissions grant %s %v cluster-wide; want them in the Role of permissions", res, r.Verbs)
				}
			}
		}
	}
	if img := strategy.DeploymentSpecs[0].Spec.Template.Spec.Containers[0].Image; img != csv.Annotations["containerImage"] ||
		!strings.HasSuffix(img, ":v0.1.0") {
		t.Errorf("deployment image %s, containerImage %s; want the same, tagged v0.1.0", img, csv.Annotations["containerImage"])
	}

	// metadata/annotations.yaml and bundle.Dockerfile: the same keys and values.
	var ann struct {
		Annotations map[string]string `json:"annotations"`
	}
	readYAML(t, filepath.Join(root, "bundle", "metadata", "annotations.yaml"), &ann)
	df, err := os.ReadFile(filepath.Join(root, "bundle.Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{}
	for _, line := range strings.Split(string(df), "\n") {
		if rest, ok := strings.CutPrefix(line, "LABEL "); ok {
			k, v, _ := strings.Cut(rest, "=")
			labels[k] = v
		}
	}
	if len(ann.Annotations) < 6 || len(labels) != len(ann.Annotations) {
		t.Errorf("annotations.yaml %v and bundle.Dockerfile labels %v differ", ann.Annotations, labels)
	}
	for k, v := range ann.Annotations {
		if labels[k] != v {
			t.Errorf("annotation %s=%s, Dockerfile label %q", k, v, labels[k])
		}
	}
	if ann.Annotations["operators.operatorframework.io.bundle.package.v1"] != "cluster-proxy-operator" ||
		ann.Annotations["operators.operatorframework.io.bundle.mediatype.v1"] != "registry+v1" {
		t.Errorf("annotations %v: want package cluster-proxy-operator, mediatype registry+v1", ann.Annotations)
	}
	for _, copyLine := range []string{"COPY bundle/manifests /manifests/", "COPY bundle/metadata /metadata/"} {
		if !strings.Contains(string(df), copyLine) {
			t.Errorf("bundle.Dockerfile lacks %q", copyLine)
		}
	}
}

func readYAML(t *testing.T, path string, into any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, into); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// versionlessRuleWarnings are the ends the validators' warning may take for the permissions on events in the
// events.k8s.io group, on endpointslices in the discovery.k8s.io group and on poddisruptionbudgets in the policy group,
// which they cannot tell from uses of events.k8s.io/v1beta1, discovery.k8s.io/v1beta1 and policy/v1beta1, removed in
// Kubernetes 1.25. The manager's event recorder writes events.k8s.io/v1 Events, its tunnel health reads
// discovery.k8s.io/v1 EndpointSlices and it keeps the proxy-servers' policy/v1 PodDisruptionBudgets; RBAC rules name
// no version, so the permissions stay, and with them this one warning (which lists the three in any order). It names
// exactly the CSV's one rule on each: a second such rule, another resource in the same warning, or a deprecated
// object in the bundle (an error of the validators) still fails.
func versionlessRuleWarnings(t *testing.T, csv *operatorsv1alpha1.ClusterServiceVersion) []string {
	t.Helper()
	var events, endpointSlices, budgets string
	spec := csv.Spec.InstallStrategy.StrategySpec
	for field, perms := range map[string][]operatorsv1alpha1.StrategyDeploymentPermissions{
		"ClusterPermissions": spec.ClusterPermissions, "Permissions": spec.Permissions} {
		for i, p := range perms {
			for j, r := range p.Rules {
				rule := fmt.Sprintf("ClusterServiceVersion.Spec.InstallStrategy.StrategySpec.%s[%d].Rules[%d]", field, i, j)
				switch {
				case slices.Contains(r.APIGroups, "events.k8s.io") && slices.Contains(r.Resources, "events"):
					events = fmt.Sprintf("events: (%+q)", []string{rule})
				case slices.Contains(r.APIGroups, "discovery.k8s.io") && slices.Contains(r.Resources, "endpointslices"):
					endpointSlices = fmt.Sprintf("endpointslices: (%+q)", []string{rule})
				case slices.Contains(r.APIGroups, "policy") && slices.Contains(r.Resources, "poddisruptionbudgets"):
					budgets = fmt.Sprintf("poddisruptionbudgets: (%+q)", []string{rule})
				}
			}
		}
	}
	if events == "" || endpointSlices == "" || budgets == "" {
		t.Fatal("the CSV's permissions grant no events in events.k8s.io (the manager's event recorder writes them), " +
			"no endpointslices in discovery.k8s.io (its tunnel health reads them) or no poddisruptionbudgets in policy " +
			"(it keeps the proxy-servers')")
	}
	var ends []string
	for _, order := range [][3]string{{events, endpointSlices, budgets}, {events, budgets, endpointSlices},
		{endpointSlices, events, budgets}, {endpointSlices, budgets, events}, {budgets, events, endpointSlices}, {budgets, endpointSlices, events}} {
		ends = append(ends, "Migrate the API(s) for "+strings.Join(order[:], ","))
	}
	return ends
}
