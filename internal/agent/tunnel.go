package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"sigs.k8s.io/apiserver-network-proxy/konnectivity-client/proto/client"
	agentproto "sigs.k8s.io/apiserver-network-proxy/proto/agent"
	"sigs.k8s.io/apiserver-network-proxy/proto/header"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/packet"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/tlsbatch"
)

// tunnel is one AgentService.Connect stream to one proxy-server. Packets from the server are read by one goroutine
// that never waits on a destination; each connection has a goroutine that reads its destination and one that writes
// to it.
type tunnel struct {
	a           *Agent
	serverID    string
	serverCount int
	cc          *grpc.ClientConn
	stream      agentproto.AgentService_ConnectClient
	// goingAway is set when the proxy-server sent GOAWAY (it shuts down): the stream still serves the connections
	// open on it, but the server takes no new agent.
	goingAway atomic.Bool
	ctx       context.Context
	cancel    context.CancelFunc

	// gRPC streams take one sender at a time.
	sendMu sync.Mutex

	mu      sync.Mutex
	closed  bool
	conns   map[int64]*endpoint
	pending map[int64]*pendingDial // by dial ID (DIAL_REQ random)
	wg      sync.WaitGroup         // goroutines of dials and connections
}

type pendingDial struct{ cancel context.CancelFunc }

// connect opens a stream and reads the server's identity from its response headers. setupCtx bounds the set-up;
// the stream lives until parent ends or the tunnel is closed.
func (a *Agent) connect(setupCtx, parent context.Context) (*tunnel, error) {
	host, _, _ := net.SplitHostPort(a.opts.ServerAddress)
	dial := a.dialer.DialContext
	if a.opts.ServerDial != nil {
		dial = a.opts.ServerDial
	}
	cc, err := grpc.NewClient("passthrough:///"+a.opts.ServerAddress,
		grpc.WithTransportCredentials(tlsbatch.Credentials(credentials.NewTLS(a.opts.TLS.ClientConfig(host)))),
		grpc.WithContextDialer(dial),
		grpc.WithNoProxy(),
		grpc.WithUserAgent("cluster-proxy-agent"),
		// DATA from the hub is decoded into pooled buffers, which writeLoop hands back once written.
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(packet.NewCodec())),
		// As on the proxy-server's agent endpoint: the framer reads the TLS connection, which holds a whole record,
		// directly instead of through a copy in a read buffer, into buffers from a pool that does not clear them
		// first (the framer and the codec write every buffer whole).
		grpc.WithReadBufferSize(0),
		experimental.WithBufferPool(packet.Buffers),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{
			Time:                a.opts.KeepaliveTime,
			Timeout:             a.opts.KeepaliveTime / 3,
			PermitWithoutStream: true,
		}),
	)
	if err != nil {
		return nil, fmt.Errorf("gRPC client for %s: %w", a.opts.ServerAddress, err)
	}
	ctx, cancel := context.WithCancel(parent)
	md := []string{header.AgentID, a.opts.AgentID, header.AgentIdentifiers, a.opts.Identifiers,
		packet.FlowControlHeader, packet.FlowControlPause}
	for _, id := range a.heldServerIDs() {
		md = append(md, contract.HeldServersMetadata, id)
	}
	ctx = metadata.AppendToOutgoingContext(ctx, md...)
	t := &tunnel{a: a, cc: cc, ctx: ctx, cancel: cancel, conns: map[int64]*endpoint{}, pending: map[int64]*pendingDial{}}

	setup, cancelSetup := context.WithTimeout(setupCtx, a.opts.ConnectTimeout)
	defer cancelSetup()
	stop := context.AfterFunc(setup, cancel)
	err = t.start()
	if !stop() && err == nil {
		err = setup.Err()
	}
	if err != nil {
		t.close()
		return nil, err
	}
	return t, nil
}

func (t *tunnel) start() error {
	stream, err := agentproto.NewAgentServiceClient(t.cc).Connect(t.ctx)
	if err != nil {
		return err
	}
	md, err := stream.Header()
	if err != nil {
		return err
	}
	if md == nil {
		// The stream ended without a header, as a refused one does: its status comes with the first Recv.
		if _, err := stream.Recv(); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		return errors.New("the proxy-server ended the stream before its header")
	}
	ids, counts := md.Get(header.ServerID), md.Get(header.ServerCount)
	if len(ids) != 1 || len(counts) != 1 {
		return fmt.Errorf("the proxy-server sent %d server IDs and %d server counts, want one of each", len(ids), len(counts))
	}
	count, err := strconv.Atoi(counts[0])
	if err != nil {
		return fmt.Errorf("the proxy-server sent server count %q: %w", counts[0], err)
	}
	t.stream, t.serverID, t.serverCount = stream, ids[0], count
	return nil
}

// watchGoAway marks the tunnel going away when its gRPC connection leaves Ready while the stream is up: that is the
// proxy-server's GOAWAY, which its graceful stop sends. It returns once marked, or when the tunnel ends.
func (t *tunnel) watchGoAway() bool {
	if !t.cc.WaitForStateChange(t.ctx, connectivity.Ready) || t.ctx.Err() != nil {
		return false
	}
	t.goingAway.Store(true)
	return true
}

// close ends the stream and the gRPC connection; serve then closes the connections.
func (t *tunnel) close() {
	t.cancel()
	_ = t.cc.Close()
}

// serve reads packets until the stream ends, then closes every connection of the tunnel and waits for their
// goroutines.
func (t *tunnel) serve() error {
	defer t.close()
	var err error
	for {
		var pkt *client.Packet
		if pkt, err = t.stream.Recv(); err != nil {
			break
		}
		t.handle(pkt)
	}

	t.cancel()
	t.mu.Lock()
	t.closed = true
	conns := make([]*endpoint, 0, len(t.conns))
	for _, e := range t.conns {
		conns = append(conns, e)
	}
	t.mu.Unlock()
	for _, e := range conns {
		e.close()
	}
	t.wg.Wait()
	return err
}

func (t *tunnel) handle(pkt *client.Packet) {
	switch pkt.Type {
	case client.PacketType_DIAL_REQ:
		t.dial(pkt.GetDialRequest())
	case client.PacketType_DATA:
		d := pkt.GetData()
		t.a.metrics.bytesToDest.Add(float64(len(d.Data)))
		if e := t.endpoint(d.ConnectID); e != nil {
			e.enqueue(d.Data)
		} else {
			t.goSend(packet.CloseResponse(d.ConnectID, "unknown connection"))
		}
	case client.PacketType_CLOSE_REQ:
		id := pkt.GetCloseRequest().ConnectID
		if e := t.endpoint(id); e != nil {
			e.close() // its reader answers CLOSE_RSP after its last DATA
		} else {
			t.goSend(packet.CloseResponse(id, "unknown connection"))
		}
	case packet.PauseType, packet.ResumeType:
		// The hub's reader of the connection fell behind, or caught up (see packet.Pause).
		if e := t.endpoint(pkt.GetData().GetConnectID()); e != nil {
			e.setPaused(pkt.Type == packet.PauseType)
		}
	case client.PacketType_DIAL_CLS:
		// The client gave up on a dial; the server has forgotten it, so nothing is answered.
		random := pkt.GetCloseDial().Random
		t.mu.Lock()
		p := t.pending[random]
		delete(t.pending, random)
		t.mu.Unlock()
		if p != nil {
			p.cancel()
		}
	default:
		t.a.opts.Log.V(2).Info("Ignoring a packet", "type", pkt.Type.String(), "serverID", t.serverID)
	}
}

func (t *tunnel) endpoint(id int64) *endpoint {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.conns[id]
}

// openConns is the number of open connections.
func (t *tunnel) openConns() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.conns)
}

// closePaused closes each connection that has carried no packet since the previous pass and whose last packet was an
// answer to the hub: on a kept-alive connection, that is a pause between requests. Its client sees the connection end
// before it sends its next request and dials again, reaching an agent that is not going away; a request whose answer
// has not come, or is still coming, keeps its connection. It returns how many connections it closed.
func (t *tunnel) closePaused() int {
	t.mu.Lock()
	var paused []*endpoint
	for _, e := range t.conns {
		n := e.packets.Load()
		if n == e.seen && e.toHub.Load() {
			paused = append(paused, e)
		}
		e.seen = n
	}
	t.mu.Unlock()
	for _, e := range paused {
		e.close() // its reader answers CLOSE_RSP
	}
	return len(paused)
}

// dial serves a DIAL_REQ in its own goroutine, which then carries the connection's destination-to-hub direction.
func (t *tunnel) dial(req *client.DialRequest) {
	if t.a.draining.Load() {
		t.a.metrics.dials.WithLabelValues(destOther, dialDraining).Inc()
		t.goSend(packet.DialResponse(req.Random, 0, "the agent is shutting down"))
		return
	}
	ctx, cancel := context.WithTimeout(t.ctx, t.a.opts.DialTimeout)
	p := &pendingDial{cancel: cancel}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		cancel()
		return
	}
	if old := t.pending[req.Random]; old != nil {
		old.cancel()
	}
	t.pending[req.Random] = p
	t.wg.Add(1)
	t.mu.Unlock()

	go func() {
		defer t.wg.Done()
		defer cancel()
		conn, dest, err := t.a.dialDestination(ctx, req.Protocol, req.Address)

		var e *endpoint
		t.mu.Lock()
		wanted := t.pending[req.Random] == p
		if wanted {
			delete(t.pending, req.Random)
		}
		if wanted && err == nil && !t.closed {
			e = t.newEndpoint(conn)
			t.conns[e.id] = e
			t.wg.Add(1) // e's writer
		}
		t.mu.Unlock()

		dials := t.a.metrics.dials
		switch {
		case err != nil && wanted:
			result := dialError
			if errors.Is(err, errRefused) {
				result = dialRefused
			}
			dials.WithLabelValues(dest, result).Inc()
			t.a.opts.Log.V(1).Info("Dial failed", "address", req.Address, "result", result, "error", err.Error())
			_ = t.send(packet.DialResponse(req.Random, 0, err.Error()))
			return
		case e == nil:
			dials.WithLabelValues(dest, dialCancelled).Inc()
			if conn != nil {
				_ = conn.Close()
			}
			return
		}
		dials.WithLabelValues(dest, dialSuccess).Inc()
		t.a.metrics.connections.Inc()
		go e.writeLoop()
		if err := t.send(packet.DialResponse(req.Random, e.id, "")); err != nil {
			e.close()
		}
		e.readLoop()
	}()
}

// remove forgets a closed connection.
func (t *tunnel) remove(e *endpoint) {
	t.mu.Lock()
	delete(t.conns, e.id)
	t.mu.Unlock()
	t.a.metrics.connections.Dec()
}

// send writes one packet; a failure means the stream is broken, so it ends the tunnel.
func (t *tunnel) send(pkt *client.Packet) error {
	t.sendMu.Lock()
	err := t.stream.Send(pkt)
	t.sendMu.Unlock()
	if err != nil {
		t.cancel()
	}
	return err
}

// goSend sends from a new goroutine, for answers the packet reader must not wait for.
func (t *tunnel) goSend(pkt *client.Packet) {
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		_ = t.send(pkt)
	}()
}

func (t *tunnel) sendDrain() {
	_ = t.send(packet.Drain())
}
