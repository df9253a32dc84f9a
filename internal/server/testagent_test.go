package server

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"sigs.k8s.io/apiserver-network-proxy/konnectivity-client/proto/client"
	"sigs.k8s.io/apiserver-network-proxy/proto/agent"
	"sigs.k8s.io/apiserver-network-proxy/proto/header"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/packet"
)

// testAgent is a minimal agent speaking ANP's agent protocol: it serves DIAL_REQ for the addresses in targets by
// dialing the mapped local address, and copies data both ways.
type testAgent struct {
	targets map[string]string
	conn    *grpc.ClientConn
	stream  agent.AgentService_ConnectClient
	cancel  context.CancelFunc

	sendMu sync.Mutex
	mu     sync.Mutex
	conns  map[int64]net.Conn
	nextID atomic.Int64

	// closeReqs receives the connection IDs of CLOSE_REQs for connections this agent does not have.
	closeReqs chan int64
	// unresponsive drops every packet while its stream stays open: an agent that died behind a forward proxy,
	// which holds its connection.
	unresponsive atomic.Bool
	// dropped receives the DIAL_REQs an unresponsive agent dropped.
	dropped chan *client.DialRequest

	done chan struct{}
	err  error // why the stream ended; read after done
}

// held names the proxy-servers the agent says it holds a tunnel to already (contract.HeldServersMetadata).
func startTestAgent(t testing.TB, addr string, tlsCfg *tls.Config, agentID, identifiers string, targets map[string]string, held ...string) *testAgent {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	md := metadata.Pairs(header.AgentID, agentID)
	if identifiers != "" {
		md.Append(header.AgentIdentifiers, identifiers)
	}
	md.Append(contract.HeldServersMetadata, held...)
	stream, err := agent.NewAgentServiceClient(conn).Connect(metadata.NewOutgoingContext(ctx, md))
	if err != nil {
		cancel()
		_ = conn.Close()
		t.Fatal(err)
	}
	a := &testAgent{
		targets: targets, conn: conn, stream: stream, cancel: cancel,
		conns: map[int64]net.Conn{}, closeReqs: make(chan int64, 16), dropped: make(chan *client.DialRequest, 16), done: make(chan struct{}),
	}
	go a.serve()
	t.Cleanup(a.Close)
	return a
}

// Close ends the agent's stream and its connections and waits for it to stop.
func (a *testAgent) Close() {
	a.cancel()
	<-a.done
	_ = a.conn.Close()
}

func (a *testAgent) send(pkt *client.Packet) error {
	a.sendMu.Lock()
	defer a.sendMu.Unlock()
	return a.stream.Send(pkt)
}

func (a *testAgent) serve() {
	defer close(a.done)
	defer func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		for id, c := range a.conns {
			_ = c.Close()
			delete(a.conns, id)
		}
	}()
	for {
		pkt, err := a.stream.Recv()
		if err != nil {
			a.err = err
			return
		}
		if a.unresponsive.Load() {
			if req := pkt.GetDialRequest(); req != nil {
				select {
				case a.dropped <- req:
				default:
				}
			}
			continue
		}
		switch pkt.Type {
		case client.PacketType_DIAL_REQ:
			a.dial(pkt.GetDialRequest())
		case client.PacketType_DATA:
			d := pkt.GetData()
			a.mu.Lock()
			c := a.conns[d.ConnectID]
			a.mu.Unlock()
			if c != nil {
				_, _ = c.Write(d.Data)
			}
		case client.PacketType_CLOSE_REQ:
			id := pkt.GetCloseRequest().ConnectID
			a.mu.Lock()
			c := a.conns[id]
			delete(a.conns, id)
			a.mu.Unlock()
			if c == nil {
				select {
				case a.closeReqs <- id:
				default:
				}
				continue
			}
			_ = c.Close()
			_ = a.send(packet.CloseResponse(id, ""))
		}
	}
}

func (a *testAgent) dial(req *client.DialRequest) {
	rsp := &client.DialResponse{Random: req.Random}
	target, ok := a.targets[req.Address]
	var c net.Conn
	if !ok {
		rsp.Error = "no such target: " + req.Address
	} else if conn, err := net.Dial("tcp", target); err != nil {
		rsp.Error = err.Error()
	} else {
		c = conn
		rsp.ConnectID = a.nextID.Add(1)
		a.mu.Lock()
		a.conns[rsp.ConnectID] = c
		a.mu.Unlock()
	}
	_ = a.send(packet.DialResponse(rsp.Random, rsp.ConnectID, rsp.Error))
	if c != nil {
		go a.pump(rsp.ConnectID, c)
	}
}

// pump copies the target's bytes to the server; when the target closes, the agent closes the connection.
func (a *testAgent) pump(id int64, c net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			data := append([]byte(nil), buf[:n]...)
			if a.send(&client.Packet{Type: client.PacketType_DATA, Payload: &client.Packet_Data{Data: &client.Data{ConnectID: id, Data: data}}}) != nil {
				return
			}
		}
		if err != nil {
			a.mu.Lock()
			_, open := a.conns[id]
			delete(a.conns, id)
			a.mu.Unlock()
			if open && (errors.Is(err, io.EOF) || !errors.Is(err, net.ErrClosed)) {
				_ = a.send(packet.CloseResponse(id, ""))
			}
			return
		}
	}
}

// accepted waits until the server accepted the stream (it sent its header) or refused it.
func (a *testAgent) accepted() error {
	md, err := a.stream.Header()
	if err == nil && len(md.Get(header.ServerID)) > 0 {
		return nil
	}
	<-a.done
	return a.err
}
