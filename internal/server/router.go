package server

import (
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"sigs.k8s.io/apiserver-network-proxy/konnectivity-client/proto/client"
	"sigs.k8s.io/apiserver-network-proxy/proto/agent"
	"sigs.k8s.io/apiserver-network-proxy/proto/header"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/packet"
)

// The router carries konnectivity's packets between the frontends and the agent streams. A frontend stream (a gRPC
// client's, or an in-process tunnel's) asks for one connection: DIAL_REQ goes to the newest agent of the address's
// host, the agent answers with DIAL_RSP (or DIAL_CLS), then DATA flows both ways until CLOSE_REQ and CLOSE_RSP.
//
// It speaks the protocol of ANP's proxy-server, so konnectivity-client and ANP's agent work with it, with four
// differences: an agent stream is read by the goroutine gRPC runs its handler on (ANP's runs two more per agent;
// without them an idle agent costs the proxy-server about 48 KiB instead of 59); a DIAL_RSP is taken only from the
// agent the dial was sent to; the dials waiting on an agent stream that ends are answered at once, with
// errAgentStreamEnded, instead of waiting for the client's timeout; and a dial an agent leaves unanswered goes to an
// agent of its host that connects later (movePending).
type router struct {
	// header is what every agent stream is answered with: the server ID and count. gRPC keeps the header of a stream
	// for the stream's life and only reads it, so the streams share one.
	header   metadata.MD
	serverID string
	backends *newestBackends
	// agents is the view of the connected agents by cluster, which the user-server and GET /agents read.
	agents *Agents
	log    logr.Logger
	// queue bounds what waits for each frontend connection's reader, and limits what one agent stream carries.
	queue  queuePolicy
	limits agentLimits

	mu sync.Mutex
	// pending holds the dials sent to an agent and not answered yet, by dial ID.
	pending map[int64]*link
}

// errNoAgent answers a dial to a host no agent serves.
var errNoAgent = packet.ErrNoAgent

// errAgentStreamEnded answers the dials that were waiting on an agent stream when it ended.
var errAgentStreamEnded = errors.New("the agent stream ended before the agent answered the dial")

func newRouter(serverID string, serverCount int, agents *Agents, backends *newestBackends, log logr.Logger) *router {
	return &router{
		header:   metadata.Pairs(header.ServerID, serverID, header.ServerCount, strconv.Itoa(serverCount)),
		serverID: serverID,
		backends: backends,
		agents:   agents,
		log:      log,
		queue:    newQueuePolicy(0, 0, backends.clock),
		limits:   agentLimits{}.withDefaults(),
		pending:  map[int64]*link{},
	}
}

// packetStream is a frontend stream: client.ProxyService_ProxyServer, or an in-process tunnel.
type packetStream interface {
	Send(*client.Packet) error
	Recv() (*client.Packet, error)
}

// flowQueue is a frontend stream whose queue can pause its connection's agent (outbox, tunnelStream).
type flowQueue interface{ setFlow(*flow) }

// frontend is one frontend stream. Its own loop and the loops of agent streams send to it.
type frontend struct {
	mu     sync.Mutex
	stream packetStream
	// retire says whether a shutdown closes its connection once it is idle (retireIdle): true for the gRPC and
	// HTTP-CONNECT frontends, whose clients' kept-alive connections would otherwise be cut at the shutdown bound,
	// perhaps in the middle of an answer; the user-server drains its own connections.
	retire bool
}

func (f *frontend) send(pkt *client.Packet) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stream.Send(pkt)
}

// link is the connection a frontend stream asked for.
type link struct {
	front *frontend
	// back is the agent stream of the connection. While the dial is pending, movePending may change it under the
	// router's mu, so until the agent's DIAL_RSP only code holding mu reads it (takePending, withdraw).
	back   *backend
	random int64
	// address is the dial's, and sent when it was sent to back, for movePending.
	address string
	sent    time.Time
	connID  atomic.Int64 // from the agent's DIAL_RSP; 0 until then
	closing bool         // the frontend sent CLOSE_REQ; only the frontend's loop reads and writes it

	// packets counts the DATA packets either way, and toClient says whether the last one went to the client: a
	// connection quiet since an answer reached its client is between requests (retireIdle). seen is packets at the
	// previous retireIdle pass, which alone uses it.
	packets  atomic.Uint64
	toClient atomic.Bool
	seen     uint64
}

// carried records a DATA packet of l's connection, to the client or from it; only a retiring frontend's connection
// is ever read back, so the others skip the two atomic writes on their hot path.
func (l *link) carried(toClient bool) {
	if !l.front.retire {
		return
	}
	l.packets.Add(1)
	l.toClient.Store(toClient)
}

// backend is one agent stream.
type backend struct {
	stream   agent.AgentService_ConnectServer
	cluster  string // the cluster its certificate names
	agentID  string // scoped to the cluster: <cluster>/<agent ID>
	hosts    []string
	draining atomic.Bool
	// pausable: the agent takes packet.Pause and packet.Resume (it said so in its stream's metadata).
	pausable bool
	// dials is how many dials sent to the stream wait for its answer; the router's mu guards it, as it guards the
	// pending dials.
	dials int

	sendMu sync.Mutex

	mu    sync.Mutex
	conns map[int64]*link // established connections, by the agent's connection ID
	ended bool
	gone  chan struct{} // closed when the stream ended
}

func (b *backend) send(pkt *client.Packet) error {
	b.sendMu.Lock()
	defer b.sendMu.Unlock()
	return b.stream.Send(pkt)
}

// addConn records an established connection. Only the stream's own loop adds, so the stream has not ended.
func (b *backend) addConn(id int64, l *link) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.conns == nil {
		b.conns = map[int64]*link{}
	}
	b.conns[id] = l
	established.Inc()
}

// connCount is how many established connections the stream carries.
func (b *backend) connCount() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.conns)
}

func (b *backend) conn(id int64) *link {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.conns[id]
}

// removeConn forgets connection id if it is l's (any link's when l is nil) and returns the link it removed.
func (b *backend) removeConn(id int64, l *link) *link {
	b.mu.Lock()
	defer b.mu.Unlock()
	found := b.conns[id]
	if found == nil || (l != nil && found != l) {
		return nil
	}
	delete(b.conns, id)
	established.Dec()
	return found
}

// awaitGone waits until the stream has ended, for up to within.
func (b *backend) awaitGone(within time.Duration) {
	t := time.NewTimer(within)
	defer t.Stop()
	select {
	case <-b.gone:
	case <-t.C:
	}
}

func (b *backend) hasEnded() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ended
}

// end marks the stream ended and returns its connections.
func (b *backend) end() map[int64]*link {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.ended {
		close(b.gone)
	}
	b.ended = true
	conns := b.conns
	b.conns = nil
	established.Sub(float64(len(conns)))
	return conns
}

// closeConn asks the agent to close connection id.
func (b *backend) closeConn(id int64) {
	_ = b.send(packet.CloseRequest(id))
}

// Connect serves an agent stream on the handler's goroutine. It admits the agent (admitAgent), answers with the server
// ID and count, makes the agent a backend of its hosts and counts it as connected, then routes what the agent sends
// until the stream ends.
func (r *router) Connect(stream agent.AgentService_ConnectServer) error {
	id, err := admitAgent(stream.Context(), r.serverID, r.log)
	if err != nil {
		return err
	}
	if err := stream.SendHeader(r.header); err != nil {
		return err
	}
	// An agent chooses its agent ID, so the backend's ID carries the cluster too.
	b := &backend{stream: stream, cluster: id.Cluster, agentID: id.Cluster + "/" + id.AgentID, hosts: id.Hosts, gone: make(chan struct{})}
	if md, ok := metadata.FromIncomingContext(stream.Context()); ok {
		b.pausable = slices.Contains(md.Get(packet.FlowControlHeader), packet.FlowControlPause)
	}
	r.backends.add(b)
	r.movePending(b)
	r.agents.add(id.Cluster, id.AgentID)
	defer func() {
		r.backendGone(b)
		r.agents.remove(id.Cluster, id.AgentID)
	}()
	for {
		pkt, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		r.fromAgent(b, pkt)
	}
}

// fromAgent routes one packet of agent stream b.
func (r *router) fromAgent(b *backend, pkt *client.Packet) {
	switch pkt.Type {
	case client.PacketType_DIAL_RSP:
		rsp := pkt.GetDialResponse()
		l := r.takePending(rsp.Random, b)
		if l == nil {
			// Given up meanwhile (DIAL_CLS, or the frontend stream ended), or not a dial of this agent's.
			if rsp.ConnectID != 0 {
				b.closeConn(rsp.ConnectID)
			}
			return
		}
		if rsp.Error != "" {
			_ = l.front.send(pkt)
			return
		}
		l.connID.Store(rsp.ConnectID)
		b.addConn(rsp.ConnectID, l)
		if q, ok := l.front.stream.(flowQueue); ok && b.pausable {
			q.setFlow(&flow{send: b.send, connID: rsp.ConnectID})
		}
		if err := l.front.send(pkt); err != nil {
			b.removeConn(rsp.ConnectID, l)
			b.closeConn(rsp.ConnectID)
		}
	case client.PacketType_DIAL_CLS:
		if l := r.takePending(pkt.GetCloseDial().Random, b); l != nil {
			_ = l.front.send(pkt)
		}
	case client.PacketType_DATA:
		d := pkt.GetData()
		l := b.conn(d.ConnectID)
		if l == nil {
			packet.ReleasePayload(d.Data)
			if d.ConnectID != 0 {
				b.closeConn(d.ConnectID)
			}
			return
		}
		l.carried(true)
		if err := l.front.send(pkt); err != nil {
			r.log.V(2).Info("Could not pass data to a frontend", "agentID", b.agentID, "connectionID", d.ConnectID, "err", err)
		}
	case client.PacketType_CLOSE_RSP:
		id := pkt.GetCloseResponse().ConnectID
		if l := b.removeConn(id, nil); l != nil {
			_ = l.front.send(pkt)
		}
	case client.PacketType_DRAIN:
		r.log.V(1).Info("Agent is draining", "agentID", b.agentID)
		b.draining.Store(true)
	default:
		r.log.V(2).Info("Ignoring a packet from an agent", "type", pkt.Type, "agentID", b.agentID)
	}
}

// backendGone forgets an agent stream that ended: its connections get CLOSE_RSP, and the dials waiting on it get
// errAgentStreamEnded. It leaves the backends first, so a dial made again cannot choose it, and it marks the stream
// ended before it takes the dials, so that addPending refuses the dials that chose it just before.
func (r *router) backendGone(b *backend) {
	r.backends.remove(b)
	for id, l := range b.end() {
		_ = l.front.send(packet.CloseResponse(id, ""))
	}
	r.mu.Lock()
	var waiting []*link
	for random, l := range r.pending {
		if l.back == b {
			waiting = append(waiting, l)
			delete(r.pending, random)
		}
	}
	b.dials = 0
	r.mu.Unlock()
	for _, l := range waiting {
		_ = l.front.send(packet.DialResponse(l.random, 0, errAgentStreamEnded.Error()))
	}
}

// addPending records a dial sent to l.back. It fails with errAgentStreamEnded when that stream has ended:
// backendGone marks the stream ended before it takes the stream's dials, under the same lock, so a dial is either
// taken by it or refused here. It fails with errAgentBusy when the stream carries as many connections, or has as many
// dials unanswered, as the limits allow.
func (r *router) addPending(l *link) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if l.back.hasEnded() {
		return errAgentStreamEnded
	}
	if l.back.dials >= r.limits.pendingDials {
		limitRefusals.WithLabelValues(limitPendingDialsPerAgent).Inc()
		return errAgentBusy
	}
	if l.back.connCount()+l.back.dials >= r.limits.connections {
		limitRefusals.WithLabelValues(limitConnectionsPerAgent).Inc()
		return errAgentBusy
	}
	r.pending[l.random] = l
	l.back.dials++
	return nil
}

// isPending reports whether l's dial waits for its answer.
func (r *router) isPending(l *link) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pending[l.random] == l
}

// withdraw removes l's dial if it is still waiting for its answer, and returns the agent stream it was sent to.
func (r *router) withdraw(l *link) *backend {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pending[l.random] != l {
		return nil
	}
	delete(r.pending, l.random)
	l.back.dials--
	return l.back
}

// pendingMoveAfter is how long a dial waits for its agent's answer before an agent of its host that connects later
// takes it over (movePending). An agent answers a dial within milliseconds.
const pendingMoveAfter = time.Second

// movePending sends to b, an agent stream that just connected, each dial of b's hosts that an older stream has left
// unanswered for pendingMoveAfter: the agent of that stream is most likely cut off (a network outage, a forward proxy
// holding a dead connection), and the agent that just connected is the one likely to answer; with TCP's retransmit
// back-off, the old stream may carry the dial only tens of seconds after the network is back. The old stream is told
// DIAL_CLS, and an answer it sends after all is closed at its agent (fromAgent).
func (r *router) movePending(b *backend) {
	type move struct {
		l    *link
		from *backend
	}
	var moves []move
	now := r.backends.clock.Now()
	r.mu.Lock()
	if b.hasEnded() {
		r.mu.Unlock()
		return
	}
	for _, l := range r.pending {
		if l.back != b && now.Sub(l.sent) >= pendingMoveAfter && slices.Contains(b.hosts, hostOf(l.address)) {
			moves = append(moves, move{l, l.back})
			l.back.dials--
			b.dials++
			l.back, l.sent = b, now
		}
	}
	r.mu.Unlock()
	for _, m := range moves {
		movedDials.Inc()
		r.log.V(1).Info("A dial unanswered by its agent goes to an agent that connected since", "address", m.l.address,
			"from", m.from.agentID, "to", b.agentID)
		go func() { _ = m.from.send(packet.CloseDial(m.l.random)) }()
		if err := b.send(packet.DialRequest(m.l.address, m.l.random)); err != nil && r.takePending(m.l.random, b) != nil {
			_ = m.l.front.send(packet.DialResponse(m.l.random, 0, "the dial could not be sent to the agent: "+err.Error()))
		}
	}
}

// takePending removes and returns dial random if it was sent to b.
func (r *router) takePending(random int64, b *backend) *link {
	r.mu.Lock()
	defer r.mu.Unlock()
	l := r.pending[random]
	if l == nil || l.back != b {
		return nil
	}
	delete(r.pending, random)
	b.dials--
	return l
}

// serveFrontend serves a frontend stream until the client ends it: one dial, then that connection's packets. retire
// says whether a shutdown closes the connection once it is idle (see frontend), and pick chooses the agent stream of
// the dial's host: newestBackends.await, with the context the dial waits for reconnecting agents in.
func (r *router) serveFrontend(stream packetStream, retire bool, pick picker) error {
	f := &frontend{stream: stream, retire: retire}
	var l *link
	defer func() {
		if l != nil {
			r.frontendGone(l)
		}
	}()
	for {
		pkt, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		switch pkt.Type {
		case client.PacketType_DIAL_REQ:
			req := pkt.GetDialRequest()
			if l != nil {
				_ = f.send(packet.DialResponse(req.Random, 0, "a stream carries one connection, and this one has dialed already"))
				continue
			}
			if l = r.dialAgent(f, pkt, pick); l == nil {
				return nil
			}
		case client.PacketType_DIAL_CLS:
			// The client gave up. An answer that comes later is closed at the agent (fromAgent).
			if l != nil && l.random == pkt.GetCloseDial().Random {
				r.withdraw(l)
			}
		case client.PacketType_DATA:
			d := pkt.GetData()
			if l == nil || d.ConnectID == 0 || d.ConnectID != l.connID.Load() {
				_ = f.send(packet.CloseResponse(d.ConnectID, "no such connection on this stream"))
				continue
			}
			l.carried(false)
			if err := l.back.send(pkt); err != nil {
				r.log.V(2).Info("Could not pass data to an agent", "agentID", l.back.agentID, "connectionID", d.ConnectID, "err", err)
			}
		case client.PacketType_CLOSE_REQ:
			id := pkt.GetCloseRequest().ConnectID
			if l == nil || id == 0 || id != l.connID.Load() {
				_ = f.send(packet.CloseResponse(id, "no such connection on this stream"))
				continue
			}
			l.closing = true
			if err := l.back.send(pkt); err != nil && l.back.removeConn(id, l) != nil {
				_ = f.send(packet.CloseResponse(id, "the close could not be sent to the agent: "+err.Error()))
			}
		default:
			r.log.V(2).Info("Ignoring a packet from a frontend", "type", pkt.Type)
		}
	}
}

// picker chooses the agent stream a dial to host goes to; nil when none takes it, and an error when the dial is
// refused (its message answers the client).
type picker func(host string) (*backend, error)

// awaiting picks the newest agent stream of a host, waiting for a reconnecting one while ctx lasts.
func (r *router) awaiting(ctx context.Context) picker {
	return func(host string) (*backend, error) { return r.backends.await(ctx, host), nil }
}

// authorized picks as next does, then lets the dial go to the stream only when allow admits its cluster.
func authorized(next picker, allow func(cluster string) error) picker {
	return func(host string) (*backend, error) {
		b, err := next(host)
		if b == nil || err != nil {
			return b, err
		}
		if err := allow(b.cluster); err != nil {
			return nil, err
		}
		return b, nil
	}
}

// dialAgent sends a frontend's DIAL_REQ to the agent stream pick chooses and returns the dial's link. An agent stream
// can break under the send (its forward proxy died, and the stream has not ended here yet): the dial then waits until
// that stream is gone and goes to the agent pick chooses then, once. When no agent takes the dial, dialAgent answers
// the frontend and returns nil.
func (r *router) dialAgent(f *frontend, pkt *client.Packet, pick picker) *link {
	req := pkt.GetDialRequest()
	failure := errNoAgent.Error()
	for range 2 {
		b, err := pick(hostOf(req.Address))
		if err != nil {
			failure = err.Error()
			break
		}
		if b == nil {
			break
		}
		l := &link{front: f, back: b, random: req.Random, address: req.Address, sent: r.backends.clock.Now()}
		if err := r.addPending(l); errors.Is(err, errAgentBusy) {
			failure = err.Error()
			break
		} else if err != nil { // it ended after pick, and has left the backends
			failure = err.Error()
			continue
		}
		err = b.send(pkt)
		if err == nil {
			return l
		}
		if r.takePending(l.random, b) == nil {
			if r.isPending(l) {
				return l // moved to an agent that connected meanwhile (movePending)
			}
			return nil // the stream ended meanwhile, and answered the dial (backendGone)
		}
		failure = "the dial could not be sent to the agent: " + err.Error()
		r.log.V(1).Info("An agent stream broke under a dial; choosing again once it is gone", "agentID", b.agentID, "err", err)
		b.awaitGone(time.Second)
	}
	_ = f.send(packet.DialResponse(req.Random, 0, failure))
	return nil
}

// frontendGone cleans up after a frontend stream: a dial still waiting is withdrawn at the agent, and a connection
// still open is closed there.
func (r *router) frontendGone(l *link) {
	if b := r.withdraw(l); b != nil {
		_ = b.send(packet.CloseDial(l.random))
		return
	}
	id := l.connID.Load()
	if id == 0 || l.back.removeConn(id, l) == nil || l.closing {
		return
	}
	l.back.closeConn(id)
}

// retireIdle closes, at the agent and at the client, each connection of a retiring frontend (see frontend) that has
// carried no packet since the previous pass and whose last packet was an answer to the client: on a kept-alive
// connection, that is a pause between requests. Its client sees the connection end (CLOSE_RSP) before it sends the
// next request and dials again, reaching a replica that is not going away; a request whose answer has not come, or
// is still coming, keeps its connection. A shutdown calls it every retireInterval after the lame duck, so that the
// frontends' graceful stop ends with the clients' kept-alive connections instead of cutting them at its bound. It
// returns how many connections it closed.
func (r *router) retireIdle() int {
	type idle struct {
		id int64
		l  *link
	}
	closed := 0
	for _, b := range r.backends.all() {
		var quiet []idle
		b.mu.Lock()
		for id, l := range b.conns {
			if !l.front.retire {
				continue
			}
			n := l.packets.Load()
			if n == l.seen && l.toClient.Load() {
				quiet = append(quiet, idle{id, l})
				delete(b.conns, id)
				established.Dec()
			}
			l.seen = n
		}
		b.mu.Unlock()
		for _, q := range quiet {
			b.closeConn(q.id)
			_ = q.l.front.send(packet.CloseResponse(q.id, ""))
		}
		closed += len(quiet)
	}
	return closed
}

// hostOf is the host of a dial address, as the agents' host identifiers name it.
func hostOf(address string) string {
	if host, _, err := net.SplitHostPort(address); err == nil {
		return host
	}
	return address
}

// proxyService is the gRPC frontend: each client stream is served by the router, for the clusters its client
// certificate may reach.
type proxyService struct {
	client.UnimplementedProxyServiceServer
	r       *router
	access  *frontendAccess
	streams *clientStreams
}

// Proxy serves one client stream: its packets are read and routed on a goroutine of their own, while the handler's
// goroutine sends the client what its outbox holds, so that a client that does not read holds up nothing but itself
// (see queuePolicy). A client cut off that way sees the stream end with ResourceExhausted.
func (p proxyService) Proxy(stream client.ProxyService_ProxyServer) error {
	ctx := stream.Context()
	cert := verifiedPeerCertificate(ctx)
	release, err := p.streams.acquire(cert)
	if err != nil {
		return status.Error(codes.ResourceExhausted, err.Error())
	}
	defer release()
	out := newOutbox(stream, p.r.queue)
	served := make(chan error, 1)
	go func() {
		// A dial waits for a reconnecting agent while the client's stream lasts.
		err := p.r.serveFrontend(out, true, authorized(p.r.awaiting(ctx), func(cluster string) error {
			return p.access.check(ctx, viaGRPC, cert, cluster)
		}))
		out.finish()
		served <- err
	}()
	if err := out.run(ctx); err != nil {
		return err
	}
	return <-served
}

// agentService is the agent endpoint.
type agentService struct {
	agent.UnimplementedAgentServiceServer
	r *router
}

func (a agentService) Connect(stream agent.AgentService_ConnectServer) error {
	return a.r.Connect(stream)
}
