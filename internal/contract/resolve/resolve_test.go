package resolve

import (
	"context"
	"net"
	"testing"

	. "github.com/onsi/gomega"
)

func TestParse(t *testing.T) {
	g := NewWithT(t)
	r, err := Parse([]string{"Kubernetes.Default.svc:443=127.0.0.1:6443", "hub.example:8091=[::1]:18091"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(r.Address("kubernetes.default.svc:443")).To(Equal("127.0.0.1:6443"))
	g.Expect(r.Address("hub.example:8091")).To(Equal("[::1]:18091"))
	g.Expect(r.Address("hub.example:443")).To(Equal("hub.example:443"), "only the named port is overridden")

	for _, bad := range []string{"hub.example:8091", "hub.example=127.0.0.1:1", "hub.example:8091=127.0.0.1", ":1=127.0.0.1:1"} {
		_, err := Parse([]string{bad})
		g.Expect(err).To(MatchError(ContainSubstring("--resolve")), bad)
	}
}

func TestResolverDialsTheOverride(t *testing.T) {
	g := NewWithT(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = ln.Close() }()
	r := Resolver{"kube.internal:443": ln.Addr().String()}
	c, err := r.DialContext(context.Background(), "tcp", "kube.internal:443")
	g.Expect(err).NotTo(HaveOccurred())
	_ = c.Close()
}
