package server_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/tunneltest"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/pkg/clusterproxy"
)

// streamBytes is how much each stream sends and reads back; chunkSizes are its writes, in turn: around the codec's
// pooled sizes (4, 8, 16, 32 KiB) and beyond its largest packet.
const streamBytes = 1 << 20

var chunkSizes = []int{1, 100, 4097, 8192, 8193, 16383, 16384, 32768, 40000, 65536}

// TestStreamsOfManyClustersCarryOnlyTheirOwnBytes moves streams of several clusters at once through one proxy-server
// and their agents, by the in-process tunnels (whose reads hand payload buffers back to the pool) and the gRPC frontend
// (pkg/clusterproxy), each stream a sequence of 8-byte words that name the stream and their place in it. Every byte
// that comes back is checked: one of another stream, or of a buffer handed back too early, names where it came from.
// make test also runs it with -tags poisonbuffers, which overwrites every released buffer and panics on a second
// release, so that a too-early release shows at once, not only when another stream happens to reuse the buffer.
func TestStreamsOfManyClustersCarryOnlyTheirOwnBytes(t *testing.T) {
	hub := tunneltest.Start(t, "proxy-ns")
	clusters := []string{"tenant-a", "tenant-b", "2nd-tenant"}
	for _, c := range clusters {
		hub.StartAgent(t, c, echoServer(t))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	proxies, err := clusterproxy.New(ctx, nil, clusterproxy.Options{Reader: hub.Reader(), Resolve: hub.Resolve})
	if err != nil {
		t.Fatal(err)
	}
	ways := []struct {
		name string
		dial func(ctx context.Context, cluster string) (net.Conn, error)
	}{
		{"in-process", func(ctx context.Context, cluster string) (net.Conn, error) {
			return hub.Server.DialCluster(ctx, cluster, 443)
		}},
		{"gRPC frontend", func(ctx context.Context, cluster string) (net.Conn, error) {
			return proxies.Dialer(cluster).DialContext(ctx, "tcp", cluster+":443")
		}},
	}
	const perWay = 3
	var wg sync.WaitGroup
	errs := make(chan error, len(clusters)*len(ways)*perWay)
	id := uint64(0)
	for _, c := range clusters {
		for _, way := range ways {
			for range perWay {
				id++
				stream := id
				wg.Go(func() {
					if err := roundTrip(ctx, way.dial, c, stream); err != nil {
						errs <- fmt.Errorf("stream %d (%s, %s): %w", stream, c, way.name, err)
					}
				})
			}
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// word is the k-th 8-byte word of stream id.
func word(id, k uint64) uint64 { return id<<40 | k }

// roundTrip opens a stream to cluster's echo, writes streamBytes of stream id's words and reads them back.
func roundTrip(ctx context.Context, dial func(context.Context, string) (net.Conn, error), cluster string, id uint64) error {
	conn, err := dial(ctx, cluster)
	if err != nil {
		return err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	sent := make([]byte, streamBytes)
	for k := range uint64(streamBytes / 8) {
		binary.LittleEndian.PutUint64(sent[8*k:], word(id, k))
	}
	wrote := make(chan error, 1)
	go func() {
		b := sent
		for i := 0; len(b) > 0; i++ {
			n := min(chunkSizes[i%len(chunkSizes)], len(b))
			if _, err := conn.Write(b[:n]); err != nil {
				wrote <- err
				return
			}
			b = b[n:]
		}
		wrote <- nil
	}()
	got := make([]byte, streamBytes)
	if _, err := io.ReadFull(conn, got); err != nil {
		return fmt.Errorf("read back: %w", err)
	}
	if err := <-wrote; err != nil {
		return fmt.Errorf("write: %w", err)
	}
	for k := range uint64(streamBytes / 8) {
		if w := binary.LittleEndian.Uint64(got[8*k:]); w != word(id, k) {
			return fmt.Errorf("word %d is %#x, sent %#x: other bytes (read as word %d of stream %d)", k, w, word(id, k), w&(1<<40-1), w>>40)
		}
	}
	return nil
}

// echoServer is a TCP server on 127.0.0.1 that writes back what it reads; it stands in for a cluster's port 443.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			})
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		wg.Wait()
	})
	return ln.Addr().String()
}
