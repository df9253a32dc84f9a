package tlsbatch

import (
	"context"
	"net"

	"google.golang.org/grpc/credentials"
)

// Credentials returns creds, a TLS TransportCredentials, with each connection's writes batched: gRPC flushes its
// write buffer (32 KiB) in one Write, which then leaves in one system call instead of one per record.
func Credentials(creds credentials.TransportCredentials) credentials.TransportCredentials {
	return batchedCredentials{creds}
}

type batchedCredentials struct {
	credentials.TransportCredentials
}

func (b batchedCredentials) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	under := New(raw)
	c, info, err := b.TransportCredentials.ClientHandshake(ctx, authority, under)
	if err != nil {
		return nil, nil, err
	}
	return &batchedConn{Conn: c, under: under}, info, nil
}

func (b batchedCredentials) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	under := New(raw)
	c, info, err := b.TransportCredentials.ServerHandshake(under)
	if err != nil {
		return nil, nil, err
	}
	return &batchedConn{Conn: c, under: under}, info, nil
}

func (b batchedCredentials) Clone() credentials.TransportCredentials {
	return batchedCredentials{b.TransportCredentials.Clone()}
}

// batchedConn is the TLS connection gRPC writes to.
type batchedConn struct {
	net.Conn
	under *Conn
}

func (c *batchedConn) Write(p []byte) (int, error) { return c.under.BatchedWrite(c.Conn, p) }
