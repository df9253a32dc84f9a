package tlsbatch

import (
	"context"
	"net"
	"sync"
	"testing"

	. "github.com/onsi/gomega"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/peer"
)

// streamingServer answers StreamingOutputCall with the payload sizes asked for.
type streamingServer struct {
	testgrpc.UnimplementedTestServiceServer
}

func (streamingServer) StreamingOutputCall(req *testgrpc.StreamingOutputCallRequest, stream testgrpc.TestService_StreamingOutputCallServer) error {
	for _, p := range req.GetResponseParameters() {
		body := make([]byte, p.GetSize())
		for i := range body {
			body[i] = byte(i)
		}
		if err := stream.Send(&testgrpc.StreamingOutputCallResponse{Payload: &testgrpc.Payload{Body: body}}); err != nil {
			return err
		}
	}
	return nil
}

// recordingListener keeps every accepted connection, so a test can see what the server wrote to TCP.
type recordingListener struct {
	net.Listener
	mu    sync.Mutex
	conns []*recordingConn
}

func (l *recordingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	rec := &recordingConn{Conn: c}
	l.mu.Lock()
	l.conns = append(l.conns, rec)
	l.mu.Unlock()
	return rec, nil
}

func TestGRPCFlushesLeaveInOneSystemCallAndKeepTheirTLSPeer(t *testing.T) {
	RegisterTestingT(t)
	serverCfg, clientCfg := tlsConfigs(t)
	serverCfg.NextProtos = []string{"h2"}
	srv := grpc.NewServer(grpc.Creds(Credentials(credentials.NewTLS(serverCfg))))
	testgrpc.RegisterTestServiceServer(srv, streamingServer{})
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	ln := &recordingListener{Listener: tcp}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)

	cc, err := grpc.NewClient("passthrough:///"+tcp.Addr().String(), grpc.WithTransportCredentials(Credentials(credentials.NewTLS(clientCfg))))
	Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = cc.Close() })

	const messages, size = 16, 32 << 10
	params := make([]*testgrpc.ResponseParameters, messages)
	for i := range params {
		params[i] = &testgrpc.ResponseParameters{Size: size}
	}
	stream, err := testgrpc.NewTestServiceClient(cc).StreamingOutputCall(context.Background(),
		&testgrpc.StreamingOutputCallRequest{ResponseParameters: params})
	Expect(err).NotTo(HaveOccurred())
	for range messages {
		resp, err := stream.Recv()
		Expect(err).NotTo(HaveOccurred())
		body := resp.GetPayload().GetBody()
		Expect(body).To(HaveLen(size))
		for i, b := range body {
			if b != byte(i) {
				t.Fatalf("byte %d of a message is %d, want %d", i, b, byte(i))
			}
		}
	}
	p, ok := peer.FromContext(stream.Context())
	Expect(ok).To(BeTrue())
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	Expect(ok).To(BeTrue(), "the client sees the TLS handshake of its server: %T", p.AuthInfo)
	Expect(info.State.PeerCertificates[0].Subject.CommonName).To(Equal("server"))

	ln.mu.Lock()
	Expect(ln.conns).To(HaveLen(1))
	writes := ln.conns[0].taken()
	ln.mu.Unlock()
	largest := 0
	for _, w := range writes {
		largest = max(largest, len(w))
	}
	// crypto/tls alone writes records of at most 16 KiB and 22 bytes each; gRPC flushes 32 KiB at a time.
	Expect(largest).To(BeNumerically(">", RecordPayload+22), "the server sends several records in one write")
}
