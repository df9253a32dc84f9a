package olm

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	operatorsv1 "github.com/operator-framework/api/pkg/operators/v1"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/kubeclient"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/ociimage"
)

const (
	// Namespace runs OLM's operators and is its global catalog namespace: a CatalogSource there serves every
	// namespace.
	Namespace = "olm"
	// CatalogSource names the catalog's CatalogSource.
	CatalogSource = "cluster-proxy-catalog"
	// Version is OLM's, as hack/olm/go.mod pins it.
	Version = "v0.38.0"

	// olmImage and opmImage are loaded on the hub's node, never pulled: OLM's chart runs the first, and OLM's
	// bundle-unpack Jobs run both. The bundle and catalog images are pulled from the Registry.
	olmImage = "registry.local/operator-lifecycle-manager:" + Version
	opmImage = "registry.local/operator-framework/opm:v1.61.0"
	// BundleRepository and CatalogRepository are the registry's repositories of the bundle and catalog images.
	BundleRepository  = "cluster-proxy-operator/cluster-proxy-operator-bundle"
	CatalogRepository = "cluster-proxy-operator/cluster-proxy-operator-catalog"
	// user runs OLM's programs and opm: the chart's pods are runAsNonRoot, which needs a numeric user in the image.
	user = 1001
	// busybox is Debian's busybox-static (make busybox): the cp that OLM's bundle-unpack Jobs run from OLM's image.
	busybox = "/bin/busybox"
)

// Tools are the programs of 'make olm' (bin/olm): olm, catalog, package-server and cpb (OLM's), opm,
// registry and grpc_health_probe, and chart (OLM's Helm chart, from its module).
type Tools struct{ Dir string }

func (t Tools) path(name string) string { return filepath.Join(t.Dir, name) }

// Opm is the opm program.
func (t Tools) Opm() string { return t.path("opm") }

// Check reports a missing tool.
func (t Tools) Check() error {
	for _, name := range []string{"olm", "catalog", "package-server", "cpb", "opm", "registry", "grpc_health_probe", "chart/Chart.yaml"} {
		if _, err := os.Stat(t.path(name)); err != nil {
			return fmt.Errorf("OLM's tools (make olm): %w", err)
		}
	}
	if _, err := os.Stat(busybox); err != nil {
		return fmt.Errorf("busybox-static (make busybox): %w", err)
	}
	return nil
}

// WriteImages writes the archives of the images the hub's node loads into dir: OLM's (its operators at /bin, as the
// chart runs them, and cp and cpb, which the util container of a bundle-unpack Job runs) and opm's (opm and
// grpc_health_probe, the base of the catalog image, and what a bundle-unpack Job extracts a bundle with).
func (t Tools) WriteImages(dir string) (olmArchive, opmArchive string, err error) {
	var programs []ociimage.File
	for _, p := range []string{"olm", "catalog", "package-server", "cpb"} {
		f, err := ociimage.Copy("bin/"+p, 0o755, t.path(p))
		if err != nil {
			return "", "", err
		}
		programs = append(programs, f)
	}
	// busybox runs the applet its program is named after.
	cp, err := ociimage.Copy("bin/cp", 0o755, busybox)
	if err != nil {
		return "", "", err
	}
	olmPath, opmPath := filepath.Join(dir, "olm.tar"), filepath.Join(dir, "opm.tar")
	built, err := ociimage.Build(v1.Config{User: owner(), Env: []string{"PATH=/bin"}},
		ociimage.Step{Files: append([]ociimage.File{ociimage.Dir("bin", 0o755, 0), cp}, programs...), CreatedBy: "make olm"})
	if err != nil {
		return "", "", err
	}
	if err := ociimage.WriteArchive(olmPath, olmImage, built); err != nil {
		return "", "", err
	}
	opm, err := t.opmStep()
	if err != nil {
		return "", "", err
	}
	if built, err = ociimage.Build(opmConfig(), opm); err != nil {
		return "", "", err
	}
	return olmPath, opmPath, ociimage.WriteArchive(opmPath, opmImage, built)
}

func owner() string { return fmt.Sprintf("%d:%d", user, user) }

// opmConfig runs 'opm serve /configs' as user, with /tmp for its cache.
func opmConfig() v1.Config {
	return v1.Config{User: owner(), Entrypoint: []string{"/bin/opm"}, Cmd: []string{"serve", "/configs"},
		Env: []string{"PATH=/bin", "TMPDIR=/tmp"}}
}

// opmStep is the layer of opm's image: opm and grpc_health_probe at /bin, and /tmp.
func (t Tools) opmStep() (ociimage.Step, error) {
	files := []ociimage.File{ociimage.Dir("bin", 0o755, 0), ociimage.Dir("tmp", 0o1777, 0)}
	for _, p := range []string{"opm", "grpc_health_probe"} {
		f, err := ociimage.Copy("bin/"+p, 0o755, t.path(p))
		if err != nil {
			return ociimage.Step{}, err
		}
		files = append(files, f)
	}
	return ociimage.Step{Files: files, CreatedBy: "make olm"}, nil
}

// PushCatalogImage pushes the catalog's image to reg, as a user builds it on opm's (opm's layer, then the catalog at
// /configs, and 'opm serve /configs' as its command), and sets cat.Image.
func (t Tools) PushCatalogImage(ctx context.Context, reg *Registry, cat *Catalog) error {
	opm, err := t.opmStep()
	if err != nil {
		return err
	}
	configs, err := treeFiles(cat.Dir, "configs")
	if err != nil {
		return err
	}
	config := opmConfig()
	config.Labels = map[string]string{"operators.operatorframework.io.index.configs.v1": "/configs"}
	img, err := ociimage.Build(config, opm, ociimage.Step{Files: configs, CreatedBy: "the catalog"})
	if err != nil {
		return err
	}
	cat.Image, err = reg.Push(ctx, CatalogRepository, "latest", img)
	return err
}

// BundleImage is the image of the bundle in dir, as bundle.Dockerfile builds it: manifests/ and metadata/ at the
// root, and the annotations of metadata/annotations.yaml as its labels.
func BundleImage(dir string) (v1.Image, error) {
	path := filepath.Join(dir, "metadata", "annotations.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var metadata struct {
		Annotations map[string]string `json:"annotations"`
	}
	if err := yaml.UnmarshalStrict(data, &metadata); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var files []ociimage.File
	for _, sub := range []string{"manifests", "metadata"} {
		tree, err := treeFiles(filepath.Join(dir, sub), sub)
		if err != nil {
			return nil, err
		}
		files = append(files, tree...)
	}
	return ociimage.Build(v1.Config{Labels: metadata.Annotations}, ociimage.Step{Files: files, CreatedBy: "the bundle"})
}

// treeFiles are the folders and files under dir, at prefix in an image.
func treeFiles(dir, prefix string) ([]ociimage.File, error) {
	var files []ociimage.File
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		at := filepath.Join(prefix, rel)
		if d.IsDir() {
			files = append(files, ociimage.Dir(at, 0o755, 0))
			return nil
		}
		f, err := ociimage.Copy(at, 0o644, path)
		files = append(files, f)
		return err
	})
	return files, err
}

// HelmValues install OLM's chart with its images loaded on the node (never pulled), OLM in Namespace, one
// package-server, and without the chart's operatorhub.io CatalogSource (installType other than upstream): this machine
// reaches no registry but the Registry.
func HelmValues() []string {
	values := []string{"namespace=" + Namespace, "catalog_namespace=" + Namespace, "installType=local", "package.replicaCount=1",
		// A bundle-unpack Job extracts a bundle with the opm image, and a configmap catalog is served by it.
		"catalog.opmImageArgs=--opmImage=" + opmImage, "catalog.commandArgs=--configmapServerImage=" + opmImage}
	for _, component := range []string{"olm", "catalog", "package"} {
		values = append(values, component+".image.ref="+olmImage, component+".image.pullPolicy=Never")
	}
	return values
}

// Helm runs helm against the hub.
type Helm func(ctx context.Context, args ...string) (string, error)

// Install installs OLM on the hub with its chart (bin/olm/chart) and a CatalogSource of catalogImage, an image in a
// registry: OLM runs it as a pod and pulls it. It returns once OLM's package-server is Succeeded and the catalog is
// READY. The images of WriteImages must be on the node.
func (t Tools) Install(ctx context.Context, helm Helm, c client.Client, catalogImage string) error {
	args := []string{"install", "olm", t.path("chart"), "--namespace", "default", "--wait", "--timeout", "5m"}
	for _, v := range HelmValues() {
		args = append(args, "--set", v)
	}
	if _, err := helm(ctx, args...); err != nil {
		return err
	}
	src := &operatorsv1alpha1.CatalogSource{
		ObjectMeta: metav1.ObjectMeta{Name: CatalogSource, Namespace: Namespace},
		Spec: operatorsv1alpha1.CatalogSourceSpec{
			SourceType: operatorsv1alpha1.SourceTypeGrpc, DisplayName: "cluster-proxy-operator", Publisher: "cluster-proxy-operator",
			Image:         catalogImage,
			GrpcPodConfig: &operatorsv1alpha1.GrpcPodConfig{SecurityContextConfig: operatorsv1alpha1.Restricted},
		},
	}
	if err := c.Create(ctx, src); err != nil {
		return err
	}
	if err := poll(ctx, 3*time.Minute, "OLM's package-server", func(ctx context.Context) (bool, error) {
		csv := &operatorsv1alpha1.ClusterServiceVersion{}
		err := c.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: "packageserver"}, csv)
		return err == nil && csv.Status.Phase == operatorsv1alpha1.CSVPhaseSucceeded, client.IgnoreNotFound(err)
	}); err != nil {
		return err
	}
	return poll(ctx, 3*time.Minute, "the catalog", func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(src), src); err != nil {
			return false, err
		}
		state := src.Status.GRPCConnectionState
		return state != nil && state.LastObservedState == "READY", nil
	})
}

// Subscribe creates, in namespace, an OperatorGroup for all namespaces (the bundle's install mode) and a Subscription
// to the package's channel in the catalog starting at startingCSV, with Manual approval: every InstallPlan, the first
// one too, waits for Approve.
func Subscribe(ctx context.Context, c client.Client, namespace, startingCSV string) error {
	return kubeclient.CreateAll(ctx, c,
		&operatorsv1.OperatorGroup{ObjectMeta: metav1.ObjectMeta{Name: Package, Namespace: namespace}},
		&operatorsv1alpha1.Subscription{
			ObjectMeta: metav1.ObjectMeta{Name: Package, Namespace: namespace},
			Spec: &operatorsv1alpha1.SubscriptionSpec{
				CatalogSource: CatalogSource, CatalogSourceNamespace: Namespace, Package: Package, Channel: Channel,
				StartingCSV: startingCSV, InstallPlanApproval: operatorsv1alpha1.ApprovalManual,
			},
		})
}

// Approve approves the InstallPlan in namespace that installs csv, once OLM has made it, and returns how many times
// it had to make OLM resolve the namespace again.
//
// OLM v0.38.0 resolves a namespace when one of its Subscriptions changes. The resolution that follows an upgrade can
// run while the replaced CSV is still being deleted; it then fails ("... exists and is not referenced by a
// subscription") and nothing resolves again until OLM's periodic resync, minutes later. While no InstallPlan is
// there, Approve changes an annotation of the Subscription every resolveNudge, as a user would touch it; a
// ResolutionFailed that lasts is returned with OLM's message.
func Approve(ctx context.Context, c client.Client, namespace, csv string) (nudges int, err error) {
	lastNudge := time.Now()
	var failure string
	err = poll(ctx, 3*time.Minute, "the InstallPlan of "+csv, func(ctx context.Context) (bool, error) {
		plans := &operatorsv1alpha1.InstallPlanList{}
		if err := c.List(ctx, plans, client.InNamespace(namespace)); err != nil {
			return false, err
		}
		for i := range plans.Items {
			plan := &plans.Items[i]
			if !slices.Contains(plan.Spec.ClusterServiceVersionNames, csv) {
				continue
			}
			if plan.Spec.Approved {
				return true, nil
			}
			patch := client.MergeFrom(plan.DeepCopy())
			plan.Spec.Approved = true
			return true, c.Patch(ctx, plan, patch)
		}
		sub := &operatorsv1alpha1.Subscription{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: Package}, sub); err != nil {
			return false, err
		}
		if cond := sub.Status.GetCondition(operatorsv1alpha1.SubscriptionResolutionFailed); cond.Status == corev1.ConditionTrue {
			failure = cond.Message
		}
		if time.Since(lastNudge) < resolveNudge {
			return false, nil
		}
		lastNudge = time.Now()
		nudges++
		patch := client.MergeFrom(sub.DeepCopy())
		metav1.SetMetaDataAnnotation(&sub.ObjectMeta, resolveAnnotation, strconv.Itoa(nudges))
		return false, c.Patch(ctx, sub, patch)
	})
	if err != nil && failure != "" {
		err = fmt.Errorf("%w; the Subscription's last ResolutionFailed: %s", err, failure)
	}
	return nudges, err
}

const (
	// resolveNudge is how long Approve waits for an InstallPlan before it makes OLM resolve again.
	resolveNudge = 10 * time.Second
	// resolveAnnotation is the Subscription annotation Approve changes to make OLM resolve again.
	resolveAnnotation = "cluster-proxy-operator.e2e/resolve"
)

// WaitSucceeded waits until the ClusterServiceVersion csv in namespace is Succeeded.
func WaitSucceeded(ctx context.Context, c client.Client, namespace, csv string, timeout time.Duration) error {
	return poll(ctx, timeout, csv+" Succeeded", func(ctx context.Context) (bool, error) {
		got := &operatorsv1alpha1.ClusterServiceVersion{}
		err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: csv}, got)
		if err == nil && got.Status.Phase == operatorsv1alpha1.CSVPhaseFailed {
			return false, fmt.Errorf("%s failed: %s: %s", csv, got.Status.Reason, got.Status.Message)
		}
		return err == nil && got.Status.Phase == operatorsv1alpha1.CSVPhaseSucceeded, client.IgnoreNotFound(err)
	})
}

// NewScheme knows OLM's types and Kubernetes' own.
func NewScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, operatorsv1.AddToScheme, operatorsv1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}

func poll(ctx context.Context, timeout time.Duration, what string, cond wait.ConditionWithContextFunc) error {
	if err := wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, cond); err != nil {
		return fmt.Errorf("waiting for %s: %w", what, err)
	}
	return nil
}
