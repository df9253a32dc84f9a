// Package olm installs the operator on a real hub cluster the way an OLM user does: Operator Lifecycle Manager
// installed with the Helm chart its own Go module ships, run from an image of the programs 'make olm' builds; bundle
// images of bundle/, and of later releases derived from it, pushed to a registry; a file-based catalog of them
// rendered and validated by opm, in a catalog image pushed there too; a CatalogSource of that image, then an
// OperatorGroup, a Subscription and the approval of its InstallPlans. The hub's node pulls the bundle and catalog
// images from the registry.
package olm

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/blang/semver/v4"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/operator-framework/api/pkg/lib/version"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	"sigs.k8s.io/yaml"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/process"
)

const (
	// Package and Channel are the bundle's (bundle/metadata/annotations.yaml).
	Package = "cluster-proxy-operator"
	Channel = "stable"
	csvFile = "cluster-proxy-operator.clusterserviceversion.yaml"
)

// Release is one version of the operator in the catalog. The first release is bundle/ as it is; each later one is
// bundle/ with its version, replacing the one before it in the channel, its manager image tagged with its version,
// and then Edit.
type Release struct {
	Version string
	// Edit changes the release's ClusterServiceVersion last; nil leaves it.
	Edit func(*operatorsv1alpha1.ClusterServiceVersion)
}

// CSVName is the name of the release's ClusterServiceVersion.
func (r Release) CSVName() string { return Package + ".v" + r.Version }

// Catalog is a file-based catalog written to a folder.
type Catalog struct {
	// Dir holds the catalog: Dir/<package>/*.yaml, what 'opm serve Dir' serves.
	Dir string
	// Images maps each release's version to its manager image, which the node must hold under that name.
	Images map[string]string
	// Bundles maps each release's version to its bundle image in the registry.
	Bundles map[string]string
	// Image is the catalog's image in the registry, once pushed (Tools.PushCatalogImage).
	Image string
}

// WriteCatalog pushes a bundle image of each release of the bundle in bundleDir to reg, and renders them from there
// into a file-based catalog under dir with opm (render, init, validate): one package, one channel in which each
// release replaces the one before.
func WriteCatalog(ctx context.Context, opm, bundleDir, dir string, releases []Release, reg *Registry) (*Catalog, error) {
	if len(releases) == 0 {
		return nil, fmt.Errorf("a catalog needs a release")
	}
	base, err := readCSV(filepath.Join(bundleDir, "manifests", csvFile))
	if err != nil {
		return nil, err
	}
	if got := base.Spec.Version.String(); got != releases[0].Version {
		return nil, fmt.Errorf("the first release is %s but bundle/ is %s", releases[0].Version, got)
	}
	baseImage, err := managerImage(base)
	if err != nil {
		return nil, err
	}
	cat := &Catalog{Dir: filepath.Join(dir, "catalog"), Images: map[string]string{}, Bundles: map[string]string{}}
	pkgDir := filepath.Join(cat.Dir, Package)
	if err := os.MkdirAll(pkgDir, 0o755); err != nil {
		return nil, err
	}
	home, err := opmHome(dir)
	if err != nil {
		return nil, err
	}
	pkg, err := opmRun(ctx, opm, home, "init", Package, "--default-channel="+Channel, "--output=yaml")
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{"package.yaml": pkg}
	channel := channelBlob{Schema: "olm.channel", Name: Channel, Package: Package}
	for i, r := range releases {
		bundle := bundleDir
		image := baseImage
		if i > 0 {
			image = baseImage.Context().Tag("v" + r.Version)
			bundle = filepath.Join(dir, "bundles", r.Version)
			if err := deriveBundle(bundleDir, bundle, base, image, r, releases[i-1]); err != nil {
				return nil, fmt.Errorf("release %s: %w", r.Version, err)
			}
		} else if r.Edit != nil {
			return nil, fmt.Errorf("release %s is bundle/ as it is: it takes no Edit", r.Version)
		}
		img, err := BundleImage(bundle)
		if err != nil {
			return nil, fmt.Errorf("release %s: %w", r.Version, err)
		}
		if cat.Bundles[r.Version], err = reg.Push(ctx, BundleRepository, "v"+r.Version, img); err != nil {
			return nil, err
		}
		rendered, err := opmRun(ctx, opm, home, "render", cat.Bundles[r.Version], "--use-http", "--output=yaml")
		if err != nil {
			return nil, err
		}
		files["bundle-v"+r.Version+".yaml"] = rendered
		cat.Images[r.Version] = image.String()
		entry := channelEntry{Name: r.CSVName()}
		if i > 0 {
			entry.Replaces = releases[i-1].CSVName()
		}
		channel.Entries = append(channel.Entries, entry)
	}
	if files["channel.yaml"], err = yaml.Marshal(channel); err != nil {
		return nil, err
	}
	for file, data := range files {
		if err := os.WriteFile(filepath.Join(pkgDir, file), data, 0o644); err != nil {
			return nil, err
		}
	}
	if _, err := opmRun(ctx, opm, home, "validate", cat.Dir); err != nil {
		return nil, err
	}
	return cat, nil
}

// channelBlob is the olm.channel schema of a file-based catalog.
type channelBlob struct {
	Schema  string         `json:"schema"`
	Name    string         `json:"name"`
	Package string         `json:"package"`
	Entries []channelEntry `json:"entries"`
}

type channelEntry struct {
	Name     string `json:"name"`
	Replaces string `json:"replaces,omitempty"`
}

// deriveBundle writes a copy of the bundle in from to to, as release r that replaces prev, with image as the manager
// image.
func deriveBundle(from, to string, base *operatorsv1alpha1.ClusterServiceVersion, image name.Tag, r, prev Release) error {
	if err := os.CopyFS(to, os.DirFS(from)); err != nil {
		return err
	}
	v, err := semver.Parse(r.Version)
	if err != nil {
		return fmt.Errorf("version: %w", err)
	}
	csv := base.DeepCopy()
	csv.Name = r.CSVName()
	csv.Spec.Version = version.OperatorVersion{Version: v}
	csv.Spec.Replaces = prev.CSVName()
	csv.Annotations["containerImage"] = image.String()
	deployments := csv.Spec.InstallStrategy.StrategySpec.DeploymentSpecs
	for i := range deployments {
		containers := deployments[i].Spec.Template.Spec.Containers
		for j := range containers {
			containers[j].Image = image.String()
		}
	}
	for i := range csv.Spec.RelatedImages {
		csv.Spec.RelatedImages[i].Image = image.String()
	}
	if r.Edit != nil {
		r.Edit(csv)
	}
	data, err := yaml.Marshal(csv)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(to, "manifests", csvFile), data, 0o644)
}

func readCSV(path string) (*operatorsv1alpha1.ClusterServiceVersion, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	csv := &operatorsv1alpha1.ClusterServiceVersion{}
	if err := yaml.UnmarshalStrict(data, csv); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return csv, nil
}

// managerImage is the image of the CSV's one Deployment.
func managerImage(csv *operatorsv1alpha1.ClusterServiceVersion) (name.Tag, error) {
	deployments := csv.Spec.InstallStrategy.StrategySpec.DeploymentSpecs
	if len(deployments) != 1 || len(deployments[0].Spec.Template.Spec.Containers) != 1 {
		return name.Tag{}, fmt.Errorf("the CSV must have one Deployment of one container")
	}
	return name.NewTag(deployments[0].Spec.Template.Spec.Containers[0].Image)
}

// opmHome is a home folder for opm under dir. opm pulls images with the containers libraries, which refuse to pull
// without a signature policy; the policy there accepts the images of the Registry, which are unsigned, as a user's
// policy.json does for an insecure registry.
func opmHome(dir string) (string, error) {
	home := filepath.Join(dir, "opm-home")
	policy := filepath.Join(home, ".config", "containers", "policy.json")
	if err := os.MkdirAll(filepath.Dir(policy), 0o755); err != nil {
		return "", err
	}
	return home, os.WriteFile(policy, []byte(`{"default": [{"type": "insecureAcceptAnything"}]}`+"\n"), 0o644)
}

// opmRun runs opm with home as its home folder, and returns its standard output.
func opmRun(ctx context.Context, opm, home string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, opm, args...)
	cmd.Env = append(os.Environ(), "HOME="+home)
	out, err := process.Output(cmd, "opm "+strings.Join(args, " "))
	return []byte(out), err
}
