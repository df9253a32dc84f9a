package realcluster

import (
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
)

func TestPodLogsOutliveTheirPodsAndRotation(t *testing.T) {
	g := NewWithT(t)
	from, to := t.TempDir(), t.TempDir()
	k := podLogKeeper{from: from, to: to, linked: map[uint64]bool{}}
	container := filepath.Join(from, "ns_pod-a_uid", "server")
	g.Expect(os.MkdirAll(container, 0o700)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(container, "0.log"), []byte("first\n"), 0o600)).To(Succeed())

	k.link()
	// kubelet rotates: the file is renamed (the same file, not linked twice) and a new 0.log begins.
	g.Expect(os.Rename(filepath.Join(container, "0.log"), filepath.Join(container, "0.log.20261128-054400"))).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(container, "0.log"), []byte("second\n"), 0o600)).To(Succeed())
	k.link()
	// The pod goes: kubelet removes its logs.
	g.Expect(os.RemoveAll(filepath.Join(from, "ns_pod-a_uid"))).To(Succeed())
	k.link()

	kept, err := filepath.Glob(filepath.Join(to, "ns_pod-a_uid", "server", "*"))
	g.Expect(err).NotTo(HaveOccurred())
	var contents []string
	for _, f := range kept {
		b, err := os.ReadFile(f)
		g.Expect(err).NotTo(HaveOccurred())
		contents = append(contents, string(b))
	}
	g.Expect(contents).To(ConsistOf("first\n", "second\n"))
}
