package layout

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestOneVersionEverywhere: the release in VERSION is the chart's version and appVersion, the CSV's version, and the
// tag v<VERSION> of the operator image that the Makefile builds, kustomize deploys, the CSV installs and the samples
// (and so the CSV's alm-examples) name.
func TestOneVersionEverywhere(t *testing.T) {
	root := filepath.Join("..", "..")
	read := func(rel string) []byte {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	version := strings.TrimSpace(string(read("VERSION")))
	if !regexp.MustCompile(`^\d+\.\d+\.\d+$`).MatchString(version) {
		t.Fatalf("VERSION holds %q, not a release like 1.2.3", version)
	}
	const repository = "quay.io/cluster-proxy-operator/cluster-proxy-operator"
	image := repository + ":v" + version

	var chart struct{ Version, AppVersion string }
	if err := yaml.Unmarshal(read("charts/cluster-proxy/Chart.yaml"), &chart); err != nil {
		t.Fatal(err)
	}
	if chart.Version != version || chart.AppVersion != version {
		t.Errorf("charts/cluster-proxy/Chart.yaml: version %q, appVersion %q; VERSION is %s", chart.Version, chart.AppVersion, version)
	}

	if !strings.Contains(string(read("Makefile")), "IMG ?= "+repository+":v$(VERSION)") {
		t.Errorf("Makefile: IMG does not default to %s:v$(VERSION)", repository)
	}

	var kustomization struct {
		Images []struct{ Name, NewName, NewTag string } `json:"images"`
	}
	if err := yaml.Unmarshal(read("config/manager/kustomization.yaml"), &kustomization); err != nil {
		t.Fatal(err)
	}
	if len(kustomization.Images) != 1 || kustomization.Images[0].NewName+":"+kustomization.Images[0].NewTag != image {
		t.Errorf("config/manager/kustomization.yaml images %+v; want %s", kustomization.Images, image)
	}

	var csv struct {
		Metadata struct {
			Name        string            `json:"name"`
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
		Spec struct {
			Version string `json:"version"`
		} `json:"spec"`
	}
	csvYAML := string(read("bundle/manifests/cluster-proxy-operator.clusterserviceversion.yaml"))
	if err := yaml.Unmarshal([]byte(csvYAML), &csv); err != nil {
		t.Fatal(err)
	}
	if csv.Spec.Version != version || csv.Metadata.Name != "cluster-proxy-operator.v"+version ||
		csv.Metadata.Annotations["containerImage"] != image {
		t.Errorf("the CSV: name %q, version %q, containerImage %q; want v%s and %s (make bundle)",
			csv.Metadata.Name, csv.Spec.Version, csv.Metadata.Annotations["containerImage"], version, image)
	}

	// Every image the samples, the CSV (its Deployment and alm-examples) and the kustomize manager name.
	imageRef := regexp.MustCompile(`(?m)^\s*(?:- )?"?image"?:\s*"?([^\s",]+)`)
	files := []string{"bundle/manifests/cluster-proxy-operator.clusterserviceversion.yaml"}
	samples, err := filepath.Glob(filepath.Join(root, "config", "samples", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range samples {
		rel, _ := filepath.Rel(root, s)
		files = append(files, rel)
	}
	seen := 0
	for _, f := range files {
		for _, m := range imageRef.FindAllStringSubmatch(string(read(f)), -1) {
			seen++
			if m[1] != image {
				t.Errorf("%s names the image %s; the release's is %s", f, m[1], image)
			}
		}
	}
	if seen < 5 { // the CSV's Deployment, two images in alm-examples and two in the sample
		t.Errorf("found %d image references, fewer than the CSV and the samples hold: the pattern misses them", seen)
	}
}
