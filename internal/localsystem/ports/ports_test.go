package ports

import (
	"net"
	"os"
	"strconv"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

func TestFreeGivesBindablePortsBelowTheEphemeralRangeNeverTwice(t *testing.T) {
	g := NewWithT(t)
	ephemeral := 32768
	if b, err := os.ReadFile(ephemeralFrom); err == nil {
		ephemeral, err = strconv.Atoi(strings.Fields(string(b))[0])
		g.Expect(err).NotTo(HaveOccurred())
	}
	seen := map[int]bool{}
	for range 50 {
		p := Free()
		g.Expect(p).To(BeNumerically(">=", lowest))
		g.Expect(p).To(BeNumerically("<", ephemeral))
		g.Expect(seen).NotTo(HaveKey(p))
		seen[p] = true
	}
	for p := range seen {
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		g.Expect(err).NotTo(HaveOccurred(), "port %d", p)
		_ = l.Close()
	}
}
