package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/ociimage"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/repo"
)

// ProbeImageName is the name ProbeImage tags its image with; a pod runs it with imagePullPolicy Never.
const ProbeImageName = "registry.local/cluster-proxy-operator/probe:test"

// ProbeImage builds the probe program (internal/testsupport/testenv/probe) and packs it, non-root, into an image archive in dir,
// ready for a real node's containerd. It returns the archive's path.
func ProbeImage(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	program := filepath.Join(dir, "probe")
	cmd := exec.Command("go", "build", "-o", program, "./internal/testsupport/testenv/probe")
	cmd.Dir, cmd.Env = repo.Root(), append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build the probe: %w: %s", err, out)
	}
	img, err := ociimage.Program(program, "probe", "65532:65532")
	if err != nil {
		return "", err
	}
	archive := filepath.Join(dir, "probe.tar")
	return archive, ociimage.WriteArchive(archive, ProbeImageName, img)
}

// ProbeWorkload is a Deployment "probe" of ProbeImageName in namespace, non-root with a read-only root filesystem and
// Ready once it answers /healthz, and a Service "probe" whose port 80 reaches its port 8080.
func ProbeWorkload(namespace string) (*appsv1.Deployment, *corev1.Service) {
	labels := map[string]string{"app": "probe"}
	deploy := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: namespace}, Spec: appsv1.DeploymentSpec{
		Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "probe", Image: ProbeImageName, ImagePullPolicy: corev1.PullNever,
				Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}},
					PeriodSeconds: 1},
				SecurityContext: &corev1.SecurityContext{
					RunAsNonRoot: ptr.To(true), ReadOnlyRootFilesystem: ptr.To(true), AllowPrivilegeEscalation: ptr.To(false),
					Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
					SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
				},
			}},
		}},
	}}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: namespace}, Spec: corev1.ServiceSpec{
		Selector: labels, Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}}}
	return deploy, svc
}
