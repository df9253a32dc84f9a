package server

import (
	"bytes"
	"log"
	"net/http"
	"net/http/pprof"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	anpserver "sigs.k8s.io/apiserver-network-proxy/pkg/server"
)

// httpConnectHandler serves the HTTP-CONNECT listener: CONNECT opens a tunnel through ANP, GET /agents lists the
// connected agents, GET /tunnels reports and probes the tunnels this replica holds.
func (s *Server) httpConnectHandler() http.Handler {
	tunnel := &anpserver.Tunnel{Server: s.anp}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodConnect:
			tunnel.ServeHTTP(w, r)
		case r.URL.Path == "/agents":
			s.agents.ServeHTTP(w, r)
		case r.URL.Path == "/tunnels":
			s.tunnels.ServeHTTP(w, r)
		default:
			http.NotFound(w, r)
		}
	})
}

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

func adminHandler() http.Handler {
	mux := http.NewServeMux()
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
