package sessionrec

import (
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
)

func TestHealthSaysWhyTheSinkFailedUntilARecordingOpens(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	blocked := filepath.Join(dir, "a-file")
	g.Expect(os.WriteFile(blocked, nil, 0o600)).To(Succeed())
	sink := &DirSink{Dir: blocked}
	r := New(Options{Sink: sink})
	up, message := r.Health()
	g.Expect(up).To(BeTrue(), "nothing failed yet")
	g.Expect(message).To(BeEmpty())

	s, err := r.Start(Meta{Cluster: "cluster1", SessionID: "s1"})
	g.Expect(err).NotTo(HaveOccurred(), "failing open")
	s.Discard()
	up, message = r.Health()
	g.Expect(up).To(BeFalse())
	g.Expect(message).To(ContainSubstring("not a directory"))

	sink.Dir = filepath.Join(dir, "recordings")
	s, err = r.Start(Meta{Cluster: "cluster1", SessionID: "s2"})
	g.Expect(err).NotTo(HaveOccurred())
	s.Discard()
	up, message = r.Health()
	g.Expect(up).To(BeTrue(), "a recording opened again")
	g.Expect(message).To(BeEmpty())
}
