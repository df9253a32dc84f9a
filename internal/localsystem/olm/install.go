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
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/ociimage"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/testenv"
)

const (
	// Namespace runs OLM's operators and is its global catalog namespace: a CatalogSource there serves every
	// namespace.
	Namespace = "olm"
	// CatalogSource names the catalog's CatalogSource, and the Deployment and Service of its opm server.
	CatalogSource = "cluster-proxy-catalog"
	// Version is OLM's, as hack/olm/go.mod pins it.
	Version = "v0.38.0"

	olmImage     = "registry.local/operator-lifecycle-manager:" + Version
	catalogImage = "registry.local/cluster-proxy-operator-catalog:dev"
	catalogPort  = 50051
	// user runs OLM's programs and opm: the chart's pods are runAsNonRoot, which needs a numeric user in the image.
	user = 1001
)

// Tools are the programs of 'make olm' (bin/olm): olm, catalog and package-server (OLM's operators), opm, and chart
// (OLM's Helm chart, from its module).
type Tools struct{ Dir string }

func (t Tools) path(name string) string { return filepath.Join(t.Dir, name) }

// Opm is the opm program.
func (t Tools) Opm() string { return t.path("opm") }

// Check reports a missing tool.
func (t Tools) Check() error {
	for _, name := range []string{"olm", "catalog", "package-server", "opm", "chart/Chart.yaml"} {
		if _, err := os.Stat(t.path(name)); err != nil {
			return fmt.Errorf("OLM's tools (make olm): %w", err)
		}
	}
	return nil
}

// WriteImages writes two image archives into dir: OLM's (its operators at /bin, as the chart runs them) and the
// catalog's (opm and the catalog at /configs, served by 'opm serve').
func (t Tools) WriteImages(dir string, cat *Catalog) (olm, catalog string, err error) {
	var programs []ociimage.File
	for _, p := range []string{"olm", "catalog", "package-server"} {
		f, err := ociimage.Copy("bin/"+p, 0o755, t.path(p))
		if err != nil {
			return "", "", err
		}
		programs = append(programs, f)
	}
	opm, err := ociimage.Copy("bin/opm", 0o755, t.Opm())
	if err != nil {
		return "", "", err
	}
	configs, err := treeFiles(cat.Dir, "configs")
	if err != nil {
		return "", "", err
	}
	owner := fmt.Sprintf("%d:%d", user, user)
	images := []struct {
		path, ref string
		config    v1.Config
		files     []ociimage.File
	}{
		{filepath.Join(dir, "olm.tar"), olmImage, v1.Config{User: owner}, append([]ociimage.File{ociimage.Dir("bin", 0o755, 0)}, programs...)},
		{filepath.Join(dir, "catalog.tar"), catalogImage,
			// Without --cache-dir, opm builds its cache in a temporary folder at start: a cache dir must be prebuilt.
			v1.Config{User: owner, Entrypoint: []string{"/bin/opm"}, Cmd: []string{"serve", "/configs"}, Env: []string{"TMPDIR=/tmp"},
				Labels: map[string]string{"operators.operatorframework.io.index.configs.v1": "/configs"}},
			append([]ociimage.File{ociimage.Dir("bin", 0o755, 0), opm, ociimage.Dir("tmp", 0o1777, 0)}, configs...)},
	}
	for _, img := range images {
		built, err := ociimage.Build(img.config, ociimage.Step{Files: img.files, CreatedBy: "make olm"})
		if err != nil {
			return "", "", err
		}
		if err := ociimage.WriteArchive(img.path, img.ref, built); err != nil {
			return "", "", err
		}
	}
	return images[0].path, images[1].path, nil
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
// reaches no registry.
func HelmValues() []string {
	values := []string{"namespace=" + Namespace, "catalog_namespace=" + Namespace, "installType=local", "package.replicaCount=1",
		// The bundle-unpack Job and configmap catalogs take these images; inline bundles and a catalog served at an
		// address need neither, but the catalog operator wants them named.
		"catalog.opmImageArgs=--opmImage=" + catalogImage, "catalog.commandArgs=--configmapServerImage=" + catalogImage}
	for _, component := range []string{"olm", "catalog", "package"} {
		values = append(values, component+".image.ref="+olmImage, component+".image.pullPolicy=Never")
	}
	return values
}

// Helm runs helm against the hub.
type Helm func(ctx context.Context, args ...string) (string, error)

// Install installs OLM on the hub with its chart (bin/olm/chart) and serves the catalog there: opm serve as a
// Deployment with a Service, and a CatalogSource at its address. It returns once OLM's package-server is Succeeded
// and the catalog is READY. The images of WriteImages must be on the node.
func (t Tools) Install(ctx context.Context, helm Helm, c client.Client) error {
	args := []string{"install", "olm", t.path("chart"), "--namespace", "default", "--wait", "--timeout", "5m"}
	for _, v := range HelmValues() {
		args = append(args, "--set", v)
	}
	if _, err := helm(ctx, args...); err != nil {
		return err
	}
	labels := map[string]string{"app.kubernetes.io/name": CatalogSource}
	deploy := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: CatalogSource, Namespace: Namespace, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
					Containers: []corev1.Container{{
						Name: "opm", Image: catalogImage, ImagePullPolicy: corev1.PullNever,
						Ports:          []corev1.ContainerPort{{Name: "grpc", ContainerPort: catalogPort}},
						ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: catalogPort}}},
						SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
							Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
						VolumeMounts: []corev1.VolumeMount{{Name: "tmp", MountPath: "/tmp"}},
					}},
					Volumes: []corev1.Volume{{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
				},
			},
		},
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: CatalogSource, Namespace: Namespace},
		Spec: corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Name: "grpc", Port: catalogPort,
			TargetPort: intstr.FromInt32(catalogPort)}}},
	}
	src := &operatorsv1alpha1.CatalogSource{
		ObjectMeta: metav1.ObjectMeta{Name: CatalogSource, Namespace: Namespace},
		Spec: operatorsv1alpha1.CatalogSourceSpec{
			SourceType: operatorsv1alpha1.SourceTypeGrpc, DisplayName: "cluster-proxy-operator", Publisher: "cluster-proxy-operator",
			Address: fmt.Sprintf("%s.%s.svc:%d", CatalogSource, Namespace, catalogPort),
		},
	}
	if err := testenv.CreateAll(ctx, c, deploy, svc, src); err != nil {
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
	return testenv.CreateAll(ctx, c,
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
