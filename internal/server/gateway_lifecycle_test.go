package server

import (
	"bufio"
	"context"
	"errors"
	"testing"

	. "github.com/onsi/gomega"
)

// drainingGateway stands for the aggregated API: when its context ends it still answers the requests it has, through
// the proxy-server's tunnels, before it returns.
type drainingGateway struct {
	srv     *Server
	drained chan error
}

func (g *drainingGateway) Run(ctx context.Context) error {
	<-ctx.Done()
	conn, err := g.srv.DialCluster(context.Background(), "c1", 443)
	if err == nil {
		_, err = get(conn, bufio.NewReader(conn), "c1", "/while-draining")
		_ = conn.Close()
	}
	g.drained <- err
	return errors.New("stopped")
}

func TestTheGatewaysDrainEndsBeforeTheTunnelsItUses(t *testing.T) {
	g := NewWithT(t)
	gw := &drainingGateway{drained: make(chan error, 1)}
	f := startFixtureWith(t, false, nil, nil, func(srv *Server) {
		gw.srv = srv
		srv.AddGateway(gw)
	})
	_, err := f.agent(t, "c1", "ns1", "agent-1", "host=c1", map[string]string{"c1:443": httpTarget(t, "c1")})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(f.stop()).To(Succeed(), "a gateway that fails is logged; the proxy-server stops cleanly")
	g.Expect(gw.drained).To(Receive(BeNil()), "the tunnels served the gateway's last request")
}
