package realcluster

import (
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
)

func TestInotifyLimitsBelowTheLeastAreRaisedAndHigherOnesKept(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	g.Expect(os.WriteFile(filepath.Join(dir, "max_user_instances"), []byte("128\n"), 0o644)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(dir, "max_user_watches"), []byte("1048576\n"), 0o644)).To(Succeed())

	g.Expect(raiseInotifyLimits(dir)).To(Succeed())
	g.Expect(os.ReadFile(filepath.Join(dir, "max_user_instances"))).To(BeEquivalentTo("1024"), "Debian's 128 is raised")
	g.Expect(os.ReadFile(filepath.Join(dir, "max_user_watches"))).To(BeEquivalentTo("1048576\n"), "a higher limit stays")

	g.Expect(os.WriteFile(filepath.Join(dir, "max_user_instances"), []byte("many"), 0o644)).To(Succeed())
	g.Expect(raiseInotifyLimits(dir)).To(MatchError(ContainSubstring(`max_user_instances: "many" is not a number`)))
}
