//go:build bench

package dataplane

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/tlsbatch"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/tlsreload"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/server/audit"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/server/userserver"
)

// startUser serves one more user-server of the world's proxy-server, built as the first (the same options, then
// change) and served as the proxy-server serves it: its serving certificate through tlsreload, h2 and http/1.1 offered,
// TLS records batched, the logger in its context. It returns its address and the counter of the tunnels it opens,
// which its Dialer (the proxy-server, wrapped) counts. It drains when the test ends.
func (o *ourStack) startUser(t *testing.T, change func(*userserver.Options)) (addr string, tunnels *atomic.Int64) {
	t.Helper()
	tunnels = &atomic.Int64{}
	opts := o.userOpts
	opts.Dialer = countingDialer{Dialer: opts.Dialer, opened: tunnels, all: &o.extraTunnels}
	change(&opts)
	user := userserver.New(opts)

	source, err := tlsreload.New(o.userCertFile, o.userKeyFile, "")
	must(t, err)
	cfg := source.ServerConfig()
	cfg.NextProtos = []string{"h2", "http/1.1"}
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	ln := tls.NewListener(tlsbatch.Listener(raw), cfg)
	ctx, cancel := context.WithCancel(logr.NewContext(context.Background(), o.log))
	done := make(chan error, 1)
	go func() { done <- user.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("user-server at %s: %v", raw.Addr(), err)
			}
		case <-time.After(15 * time.Second):
			t.Errorf("the user-server at %s did not stop within 15s", raw.Addr())
		}
	})
	return raw.Addr().String(), tunnels
}

// countingDialer counts the tunnels a user-server opens, for the tables' "tunnels opened": the proxy-server's metric
// counts those of every user-server together.
type countingDialer struct {
	userserver.Dialer
	opened, all *atomic.Int64
}

func (d countingDialer) DialCluster(ctx context.Context, cluster string, port int) (net.Conn, error) {
	conn, err := d.Dialer.DialCluster(ctx, cluster, port)
	if err == nil {
		d.opened.Add(1)
		d.all.Add(1)
	}
	return conn, err
}

// auditedUser is the user-server of the audited mode: the full path's, with an Auditor at its defaults (Metadata
// level, one event a request, kube-apiserver's blocking file sink that rotates at 100 MiB).
type auditedUser struct {
	addr    string
	dir     string // the audit log and its rotated files
	tunnels *atomic.Int64
	sent    *atomic.Int64 // requests made for the audited route
}

func startAuditedUser(t *testing.T, o *ourStack) *auditedUser {
	t.Helper()
	a := &auditedUser{dir: t.TempDir(), sent: &atomic.Int64{}}
	opts := audit.NewOptions()
	opts.LogPath = filepath.Join(a.dir, "audit.log")
	opts.Replica = "bench-server"
	auditor, err := audit.New(opts)
	must(t, err)
	auditor.Run(logr.NewContext(context.Background(), o.log))
	t.Cleanup(auditor.Shutdown) // after the user-server drained: cleanups run last first
	a.addr, a.tunnels = o.startUser(t, func(u *userserver.Options) { u.Audit = auditor })
	return a
}

// events counts the audit events written so far: the lines of the log and of its rotated files.
func (a *auditedUser) events() (int64, error) {
	files, err := filepath.Glob(filepath.Join(a.dir, "audit*.log"))
	if err != nil {
		return 0, err
	}
	var n int64
	buf := make([]byte, bufferSize)
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return 0, err
		}
		for {
			k, err := f.Read(buf)
			n += int64(bytes.Count(buf[:k], []byte{'\n'}))
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				_ = f.Close()
				return 0, err
			}
		}
		_ = f.Close()
	}
	return n, nil
}

// firstEvent is the log's first event, as much of it as tells what was recorded.
func (a *auditedUser) firstEvent() (apiVersion, kind, level, stage string, err error) {
	f, err := os.Open(filepath.Join(a.dir, "audit.log"))
	if err != nil {
		return "", "", "", "", err
	}
	defer func() { _ = f.Close() }()
	line, err := bufio.NewReader(f).ReadBytes('\n')
	if err != nil {
		return "", "", "", "", fmt.Errorf("the audit log's first line: %w", err)
	}
	var ev struct{ APIVersion, Kind, Level, Stage string }
	if err := json.Unmarshal(line, &ev); err != nil {
		return "", "", "", "", fmt.Errorf("the audit log's first line: %w", err)
	}
	return ev.APIVersion, ev.Kind, ev.Level, ev.Stage, nil
}

// checkAudited fails the test unless the audited user-server wrote one Metadata event per request sent to it so far,
// and prints the count. The last events may still be on their way to the file when a phase's last answer arrived.
func (b *bench) checkAudited(phase string) {
	a := b.w.audited
	if a == nil || (b.only != nil && !b.only[keyAudited]) {
		return
	}
	sent := a.sent.Load()
	var events int64
	var err error
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if events, err = a.events(); err != nil || events == sent || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		b.t.Errorf("%s: count the audit events: %v", phase, err)
		return
	}
	apiVersion, kind, level, stage, err := a.firstEvent()
	if err != nil {
		b.t.Errorf("%s: %v", phase, err)
		return
	}
	fmt.Fprintf(b.out, "audited full path: %d requests sent to it so far, %d events in its log (%s %s, level %s, stage %s)\n",
		sent, events, apiVersion, kind, level, stage)
	if events != sent {
		b.t.Errorf("%s: the audited user-server wrote %d audit events for %d requests", phase, events, sent)
	}
	if apiVersion != "audit.k8s.io/v1" || kind != "Event" || level != "Metadata" || stage != "ResponseComplete" {
		b.t.Errorf("%s: the audit log's first event is %s %s at level %s, stage %s; want audit.k8s.io/v1 Event, Metadata, ResponseComplete",
			phase, apiVersion, kind, level, stage)
	}
}
