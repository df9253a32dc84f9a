//go:build realcluster

package image

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/realcluster"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testenv"
)

// TestImageRunsOnARealNode loads the tarball of 'make image' into a real node's containerd and runs the kubectl
// plugin from it in a pod as locked down as the rendered Deployments' (non-root by the image's USER, read-only root,
// no capabilities, RuntimeDefault seccomp).
func TestImageRunsOnARealNode(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	binaries, pause := os.Getenv("NODE_ASSETS"), os.Getenv("PAUSE")
	if binaries == "" || pause == "" {
		t.Fatal("NODE_ASSETS and PAUSE are not set: run this test with 'make test-nodes'")
	}
	g.Expect(realcluster.Preflight(binaries, pause)).To(Succeed())
	bin := t.TempDir()
	const tag = "registry.local/cluster-proxy-operator:node-test"
	makeImage(t, bin, "image.tar", tag)

	c, err := realcluster.Start(ctx, realcluster.Options{Name: "image-node", Index: 204, Dir: filepath.Join(bin, "cluster"),
		Binaries: binaries, Pause: pause, Images: []string{filepath.Join(bin, "image.tar")}})
	g.Expect(err).NotTo(HaveOccurred())
	defer func() {
		g.Expect(c.Stop()).To(Succeed())
		g.Expect(realcluster.Leftovers(204, c.Dir())).To(BeEmpty())
	}()
	cs, err := kubernetes.NewForConfig(c.Config)
	g.Expect(err).NotTo(HaveOccurred())
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "plugin", Namespace: "default"}, Spec: batchv1.JobSpec{
		BackoffLimit: ptr.To[int32](0),
		Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy:   corev1.RestartPolicyNever,
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{
				Name: "plugin", Image: tag, ImagePullPolicy: corev1.PullNever,
				Command: []string{"/kubectl-cluster_proxy", "--help"},
				SecurityContext: &corev1.SecurityContext{
					ReadOnlyRootFilesystem: ptr.To(true), AllowPrivilegeEscalation: ptr.To(false),
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
		}},
	}}
	_, err = cs.BatchV1().Jobs("default").Create(ctx, job, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func(g Gomega) {
		j, err := cs.BatchV1().Jobs("default").Get(ctx, "plugin", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(j.Status.Failed).To(BeZero(), "the pod failed: kubectl describe pods -l job-name=plugin")
		g.Expect(j.Status.Succeeded).To(BeEquivalentTo(1))
	}).WithTimeout(2 * time.Minute).WithPolling(500 * time.Millisecond).Should(Succeed())
	g.Expect(testenv.Kubectl(c.Kubeconfig, "logs", "job/plugin")).To(ContainSubstring("health"))
}
