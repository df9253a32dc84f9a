package server

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/pprof"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/copybuf"
)

// httpConnectHandler serves the HTTP-CONNECT listener: CONNECT opens a tunnel through an agent, GET /agents lists the
// connected agents, GET /tunnels reports and probes the tunnels this replica holds.
func (s *Server) httpConnectHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodConnect:
			s.serveConnect(w, r)
		case r.URL.Path != "/agents" && r.URL.Path != "/tunnels":
			http.NotFound(w, r)
		case !fleetWide(contract.VerifiedLeaf(r.TLS)):
			// Which agents every cluster has, and probes of every tunnel: the operator's own view of the fleet.
			http.Error(w, "only the proxy-client certificate may read "+r.URL.Path, http.StatusForbidden)
		case r.URL.Path == "/agents":
			s.agents.ServeHTTP(w, r)
		case r.URL.Path == "/tunnels":
			s.tunnels.ServeHTTP(w, r)
		default:
			http.NotFound(w, r)
		}
	})
}

// serveConnect dials the request's host:port through an agent of that host, as an in-process tunnel, answers 200,
// then carries bytes both ways until either end closes: the client's end closes the connection at the agent, and
// the agent's closes the client's.
func (s *Server) serveConnect(w http.ResponseWriter, r *http.Request) {
	hijacker, ok := w.(http.Hijacker)
	if !ok {
		http.Error(w, "CONNECT needs HTTP/1.1", http.StatusHTTPVersionNotSupported)
		return
	}
	// A CONNECT tunnel outlives the listener's shutdown, as a hijacked connection does: it ends when either end
	// closes, once it is idle during a shutdown (router.retireIdle), and at the latest when the agent streams end.
	cert := contract.VerifiedLeaf(r.TLS)
	release, err := s.streams.acquire(cert)
	if err != nil {
		http.Error(w, fmt.Sprintf("CONNECT %s: %v", r.Host, err), http.StatusTooManyRequests)
		return
	}
	defer release()
	tunnel, err := s.dial(r.Context(), r.Host, nil, nil, true, func(cluster string) error {
		return s.access.check(r.Context(), viaHTTPConnect, cert, cluster)
	})
	if err != nil {
		code := http.StatusBadGateway
		var refused *accessError
		switch {
		case errors.Is(err, errNoAgent), errors.Is(err, errAgentBusy):
			code = http.StatusServiceUnavailable
		case errors.As(err, &refused):
			code = http.StatusForbidden
		}
		http.Error(w, fmt.Sprintf("CONNECT %s: %v", r.Host, err), code)
		return
	}
	defer func() { _ = tunnel.Close() }()
	conn, buffered, err := hijacker.Hijack()
	if err != nil {
		return
	}
	defer func() { _ = conn.Close() }()
	if _, err := io.WriteString(conn, "HTTP/1.1 200 Connection Established\r\n\r\n"); err != nil {
		return
	}
	fromAgent := make(chan struct{})
	go func() {
		defer close(fromAgent)
		buf := connectBuffers.Get()
		defer connectBuffers.Put(buf)
		_, _ = io.CopyBuffer(conn, tunnel, buf)
		_ = conn.Close() // the agent closed: so does the client's connection, which ends the copy below
	}()
	if n := buffered.Reader.Buffered(); n > 0 { // what the client sent right after its CONNECT
		head, _ := buffered.Peek(n)
		if _, err := tunnel.Write(head); err != nil {
			_ = conn.Close()
		}
	}
	buf := connectBuffers.Get()
	_, _ = io.CopyBuffer(tunnel, conn, buf)
	connectBuffers.Put(buf)
	_ = tunnel.Close()
	<-fromAgent
}

// connectBuffers are the buffers CONNECT tunnels copy with, a pair per tunnel while it carries bytes.
var connectBuffers copybuf.Pool

func (s *Server) healthHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !s.Ready() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	mux.Handle("/metrics", promhttp.Handler())
	return mux
}

// adminHandler serves the Go profiler on the admin port (loopback) when profiling is on, and nothing otherwise: a
// loopback port is still reachable by whoever may port-forward to the pod, and a profile or a trace costs the server.
func adminHandler(profiling bool) http.Handler {
	mux := http.NewServeMux()
	if !profiling {
		mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "profiling is off: start the proxy-server with --enable-profiling", http.StatusNotFound)
		})
		return mux
	}
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// httpErrorLog sends an http.Server's own messages (TLS handshake failures and the like) to the logger.
func httpErrorLog(l logr.Logger, server string) *log.Logger {
	return log.New(logWriter{l.WithValues("server", server)}, "", 0)
}

type logWriter struct{ l logr.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	w.l.V(1).Info(string(bytes.TrimSpace(p)))
	return len(p), nil
}
