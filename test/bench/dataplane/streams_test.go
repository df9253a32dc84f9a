//go:build bench

package dataplane

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/server/userserver"
)

const (
	streamsEach       = 500 // idle keep-alive connections, and as many slow chunked streams
	openAtOnce        = 64
	holdFor           = 5 * time.Second
	settleWindow      = 2 * time.Second // the goroutine count must not change for this long
	settleLimit       = 60 * time.Second
	releaseLimit      = 15 * time.Second
	agentOpenConn     = "cluster_proxy_agent_open_connections"
	establishedMetric = "cluster_proxy_server_established_connections"
)

// streamsResult is what the streams phase saw.
type streamsResult struct {
	errOpen, errRequest, errVerify, errClose atomic.Int64
	firstErrs                                errs

	goroutines    [3]int     // before, held, after
	heapMiB       [3]float64 // in use after a GC
	agentConns    [3]float64 // the agent's open connections to destinations
	established   [3]float64 // the proxy-server's established connections
	agentReleased float64    // the agent's open connections once the clients had closed
	openAll       time.Duration
	closeAll      time.Duration
	settle        time.Duration
	settled       bool
	minHeldBytes  int64 // the least any slow stream received during the hold
	cost          cost
	dump          string // goroutine dump written when the count did not come back
}

func (s *streamsResult) fail(counter *atomic.Int64, err error) {
	counter.Add(1)
	s.firstErrs.add(err)
}

func (s *streamsResult) errors() int64 {
	return s.errOpen.Load() + s.errRequest.Load() + s.errVerify.Load() + s.errClose.Load()
}

// streamConn is one client connection to the user-server, spoken to by hand so that every request provably uses it.
type streamConn struct {
	conn *tls.Conn
	br   *bufio.Reader
	got  atomic.Int64  // body bytes of a slow stream so far
	done chan struct{} // a slow stream's reader ended
}

func dialStream(addr string, cfg *tls.Config) (*streamConn, error) {
	d := &net.Dialer{Timeout: 10 * time.Second}
	conn, err := tls.DialWithDialer(d, "tcp", addr, cfg)
	if err != nil {
		return nil, err
	}
	return &streamConn{conn: conn, br: bufio.NewReader(conn), done: make(chan struct{})}, nil
}

func (c *streamConn) send(path string) error {
	_, err := fmt.Fprintf(c.conn, "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: %s\r\n\r\n", path, bearer)
	return err
}

// get sends a request and reads the answer's header; the caller reads and closes the body.
func (c *streamConn) get(path string) (*http.Response, error) {
	if err := c.send(path); err != nil {
		return nil, err
	}
	return c.response()
}

func (c *streamConn) response() (*http.Response, error) {
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		_ = resp.Body.Close()
		return nil, fmt.Errorf("%s: %s", resp.Status, body)
	}
	return resp, nil
}

// follow counts a slow stream's body bytes until the stream ends.
func (c *streamConn) follow(resp *http.Response) {
	defer close(c.done)
	defer func() { _ = resp.Body.Close() }()
	buf := make([]byte, 512)
	for {
		n, err := resp.Body.Read(buf)
		c.got.Add(int64(n))
		if err != nil {
			return
		}
	}
}

// small reads a /small answer (or /hold's, which is the same) and checks it.
func (c *streamConn) small() error {
	resp, err := c.response()
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err == nil && !bytes.Equal(body, smallBody) {
		err = fmt.Errorf("got %d bytes that are not the target's", len(body))
	}
	return err
}

// streams holds 1,000 concurrent streams through the one agent via the user-server: 500 slow chunked streams, and
// 500 keep-alive connections that sit idle after a first request. The idle connections' first requests wait at the
// target until all 500 are there, so that 1,000 requests hold 1,000 tunnels at once; afterwards the idle connections'
// tunnels wait in the user-server's pool. Everything is held for 5 s and checked, then closed, and the goroutine count
// must come back to where it was.
//
// The phase has its own user-server with the default bound of tunnels per cluster (MaxConnsPerCluster, 2048), which
// holds all of these streams at once, and room for 500 idle tunnels where the default keeps 64: closing it (its
// drain) at the end is what ends the idle connections' tunnels; before that, the tunnels of the slow streams must have
// ended with their clients.
func (b *bench) streams() *streamsResult {
	w := b.w
	res := &streamsResult{}
	agentMetrics := w.ours.agent.Registry()
	measure := func(i int) {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		res.goroutines[i] = runtime.NumGoroutine()
		res.heapMiB[i] = float64(ms.HeapInuse) / mib
		res.agentConns[i] = metricSum(agentMetrics, agentOpenConn)
		res.established[i] = metricSum(prometheus.DefaultGatherer, establishedMetric)
	}

	_, _, _ = settle(func(int) bool { return true }) // a stable starting point
	measure(0)
	start := sample()

	us := userserver.New(userserver.Options{
		Dialer:                 w.ours.srv,
		Clusters:               w.ours.srv.Agents(),
		ServiceProxyPort:       contract.ServiceProxyPort,
		Allowed:                w.ours.allowed,
		MaxIdleConnsPerCluster: streamsEach + openAtOnce,
		DrainTimeout:           5 * time.Second,
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(b.t, err)
	addr := ln.Addr().String()
	serveCtx, stopServe := context.WithCancel(logr.NewContext(context.Background(), w.ours.log.WithName("streams-user-server")))
	served := make(chan error, 1)
	go func() {
		served <- us.Serve(serveCtx, tls.NewListener(ln, &tls.Config{
			Certificates: []tls.Certificate{w.ours.userCert}, NextProtos: []string{"h2", "http/1.1"}, MinVersion: tls.VersionTLS12,
		}))
	}()
	waitFor(b.t, "the streams user-server", 10*time.Second, us.Ready)
	cfg := w.ours.userTLS.Clone()

	slow := make([]*streamConn, streamsEach)
	idle := make([]*streamConn, streamsEach)
	opening := time.Now()
	gate := make(chan struct{}, openAtOnce)
	var wg sync.WaitGroup
	for i := range slow {
		wg.Go(func() {
			gate <- struct{}{}
			defer func() { <-gate }()
			c, err := dialStream(addr, cfg)
			if err != nil {
				res.fail(&res.errOpen, fmt.Errorf("open a slow stream: %w", err))
				return
			}
			resp, err := c.get(streamsPath + "/slow") //nolint:bodyclose // c.follow reads and closes it
			if err != nil {
				res.fail(&res.errRequest, fmt.Errorf("slow stream: %w", err))
				_ = c.conn.Close()
				return
			}
			slow[i] = c
			go c.follow(resp)
		})
	}
	wg.Wait()

	w.streamsTarget.armHold(streamsEach)
	for i := range idle {
		wg.Go(func() {
			gate <- struct{}{}
			c, err := dialStream(addr, cfg)
			if err == nil {
				if err = c.send(streamsPath + "/hold"); err != nil {
					_ = c.conn.Close()
				}
			}
			<-gate // the requests wait for each other at the target; only the opening is limited
			if err != nil {
				res.fail(&res.errOpen, fmt.Errorf("open an idle connection: %w", err))
				return
			}
			if err := c.small(); err != nil {
				res.fail(&res.errRequest, fmt.Errorf("first request of an idle connection: %w", err))
				_ = c.conn.Close()
				return
			}
			idle[i] = c
		})
	}
	wg.Wait()
	res.openAll = time.Since(opening)

	// The hold: the measure is the streams' behaviour during this period.
	measure(1)
	before := make([]int64, len(slow))
	for i, c := range slow {
		if c != nil {
			before[i] = c.got.Load()
		}
	}
	time.Sleep(holdFor)
	res.minHeldBytes = -1
	for i, c := range slow {
		if c == nil {
			continue
		}
		select {
		case <-c.done:
			res.fail(&res.errVerify, errors.New("a slow stream ended during the hold"))
			continue
		default:
		}
		got := c.got.Load() - before[i]
		if res.minHeldBytes < 0 || got < res.minHeldBytes {
			res.minHeldBytes = got
		}
		if got == 0 {
			res.fail(&res.errVerify, errors.New("a slow stream received nothing during the hold"))
		}
	}
	for _, c := range idle {
		if c == nil {
			continue
		}
		wg.Go(func() {
			gate <- struct{}{}
			defer func() { <-gate }()
			err := c.send(streamsPath + "/small")
			if err == nil {
				err = c.small()
			}
			if err != nil {
				res.fail(&res.errVerify, fmt.Errorf("second request on an idle connection: %w", err))
			}
		})
	}
	wg.Wait()

	closing := time.Now()
	for _, c := range append(slow, idle...) {
		if c == nil {
			continue
		}
		if err := c.conn.Close(); err != nil {
			res.fail(&res.errClose, err)
		}
	}
	for _, c := range slow {
		if c != nil {
			<-c.done
		}
	}
	res.closeAll = time.Since(closing)

	// The slow streams' tunnels end with their clients; the idle connections' tunnels stay in the pool.
	deadline := time.Now().Add(releaseLimit)
	for res.agentReleased = metricSum(agentMetrics, agentOpenConn); res.agentReleased > res.agentConns[0]+streamsEach; res.agentReleased = metricSum(agentMetrics, agentOpenConn) {
		if time.Now().After(deadline) {
			res.fail(&res.errClose, fmt.Errorf("%.0f agent connections still open %s after the clients closed, want at most %.0f",
				res.agentReleased, releaseLimit, res.agentConns[0]+streamsEach))
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	stopServe()
	if err := <-served; err != nil {
		res.fail(&res.errClose, fmt.Errorf("streams user-server: %w", err))
	}

	settling := time.Now()
	_, _, res.settled = settle(func(n int) bool { return n <= res.goroutines[0] })
	res.settle = time.Since(settling)
	measure(2)
	if path := os.Getenv("BENCH_HEAPPROFILE"); path != "" {
		if f, err := os.Create(path); err == nil {
			_ = pprof.Lookup("heap").WriteTo(f, 0)
			_ = f.Close()
		}
	}
	res.cost = since(start)
	if !res.settled {
		res.dump = dumpGoroutines()
	}
	return res
}

// settle polls, with a GC before each look, until the goroutine count has not changed for settleWindow and ok
// accepts it; it gives up after settleLimit.
func settle(ok func(n int) bool) (n int, waited time.Duration, settled bool) {
	start := time.Now()
	last, since := -1, start
	for {
		runtime.GC()
		n = runtime.NumGoroutine()
		now := time.Now()
		if n != last {
			last, since = n, now
		}
		if now.Sub(since) >= settleWindow && ok(n) {
			return n, now.Sub(start), true
		}
		if now.Sub(start) > settleLimit {
			return n, now.Sub(start), false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// dumpGoroutines writes the goroutines, grouped by stack, to a file that outlives the test.
func dumpGoroutines() string {
	f, err := os.CreateTemp("", "dataplane-goroutines-*.txt")
	if err != nil {
		return ""
	}
	defer func() { _ = f.Close() }()
	_ = pprof.Lookup("goroutine").WriteTo(f, 1)
	return f.Name()
}

func (b *bench) reportStreams(res *streamsResult) {
	out := newTable(b.out, "item", "before", "held", "after")
	g := res.goroutines
	out.row("goroutines", strconv.Itoa(g[0]), strconv.Itoa(g[1]), strconv.Itoa(g[2]))
	out.row("agent open connections", fmt.Sprintf("%.0f", res.agentConns[0]), fmt.Sprintf("%.0f", res.agentConns[1]),
		fmt.Sprintf("%.0f", res.agentConns[2]))
	out.row("the proxy-server's established connections", fmt.Sprintf("%.0f", res.established[0]), fmt.Sprintf("%.0f", res.established[1]),
		fmt.Sprintf("%.0f", res.established[2]))
	out.row("heap in use MiB (after GC)", fmt.Sprintf("%.1f", res.heapMiB[0]), fmt.Sprintf("%.1f", res.heapMiB[1]), fmt.Sprintf("%.1f", res.heapMiB[2]))
	out.flush()
	fmt.Fprintf(b.out, "errors open/request/verify/close: %d/%d/%d/%d; first: %q\n", res.errOpen.Load(), res.errRequest.Load(),
		res.errVerify.Load(), res.errClose.Load(), res.firstErrs.first)
	fmt.Fprintf(b.out, "goroutines per held stream %.1f; heap per held stream %.0f KiB; least a slow stream received in the %s hold: %d B\n",
		float64(g[1]-g[0])/(2*streamsEach), (res.heapMiB[1]-res.heapMiB[0])*1024/(2*streamsEach), holdFor, res.minHeldBytes)
	fmt.Fprintf(b.out, "open all %s, close all %s, agent connections once the clients closed %.0f (the idle ones wait in the pool), settled %v after %s (stable for %s)\n",
		res.openAll.Round(10*time.Millisecond), res.closeAll.Round(10*time.Millisecond), res.agentReleased, res.settled,
		res.settle.Round(100*time.Millisecond), settleWindow)
	if res.errors() > 0 {
		b.t.Errorf("streams: %d errors, first: %q", res.errors(), res.firstErrs.first)
	}
	if !res.settled {
		b.t.Errorf("streams: %d goroutines %s after closing everything, %d before; goroutine dump in %s", g[2], settleLimit, g[0], res.dump)
	}
}
