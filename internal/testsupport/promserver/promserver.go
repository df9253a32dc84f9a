// Package promserver runs a real Prometheus (Debian's prometheus package, make promtool installs it) on 127.0.0.1 for
// the tests: it scrapes what its configuration names, evaluates the product's alerts, and answers queries through its
// HTTP API with client_golang's API client.
package promserver

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/localsystem/ports"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/process"
)

// Binary is where Debian installs Prometheus.
const Binary = "/usr/bin/prometheus"

// Server is a running Prometheus.
type Server struct {
	API  promv1.API
	URL  string
	proc *process.Process
}

// Start runs Prometheus with config (a prometheus.yml) in dir, which also holds its data and log, on a free port of
// 127.0.0.1, and waits until it is ready.
func Start(ctx context.Context, dir string, config []byte) (*Server, error) {
	if _, err := os.Stat(Binary); err != nil {
		return nil, fmt.Errorf("%s is missing: run make promtool (Debian's prometheus package): %w", Binary, err)
	}
	configPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(configPath, config, 0o600); err != nil {
		return nil, err
	}
	port := ports.Free()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	proc, err := process.Run(process.Command{
		Path: Binary,
		Args: []string{"--config.file=" + configPath, "--storage.tsdb.path=" + filepath.Join(dir, "data"),
			"--web.listen-address=" + addr, "--log.level=info"},
		LogPath: filepath.Join(dir, "prometheus.log"),
	})
	if err != nil {
		return nil, err
	}
	s := &Server{URL: "http://" + addr, proc: proc}
	client, err := api.NewClient(api.Config{Address: s.URL})
	if err != nil {
		proc.Stop()
		return nil, err
	}
	s.API = promv1.NewAPI(client)
	logPath := filepath.Join(dir, "prometheus.log")
	err = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if exited, _ := proc.Exited(); exited {
			return false, fmt.Errorf("prometheus ended before it was ready: see %s", logPath)
		}
		resp, err := http.Get(s.URL + "/-/ready")
		if err != nil {
			return false, nil
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		proc.Stop()
		return nil, fmt.Errorf("prometheus not ready (log %s): %w", logPath, err)
	}
	return s, nil
}

// Query evaluates expr now and returns its samples (a scalar as one sample without labels).
func (s *Server) Query(ctx context.Context, expr string) (model.Vector, error) {
	v, _, err := s.API.Query(ctx, expr, time.Now())
	if err != nil {
		return nil, fmt.Errorf("query %s: %w", expr, err)
	}
	switch r := v.(type) {
	case model.Vector:
		return r, nil
	case *model.Scalar:
		return model.Vector{{Value: r.Value, Timestamp: r.Timestamp}}, nil
	default:
		return nil, fmt.Errorf("query %s: a %s, not a vector", expr, v.Type())
	}
}

// Firing are the alerts named name that fire now.
func (s *Server) Firing(ctx context.Context, name string) ([]promv1.Alert, error) {
	res, err := s.API.Alerts(ctx)
	if err != nil {
		return nil, err
	}
	var out []promv1.Alert
	for _, a := range res.Alerts {
		if string(a.Labels["alertname"]) == name && a.State == promv1.AlertStateFiring {
			out = append(out, a)
		}
	}
	return out, nil
}

// Stop ends Prometheus, by its PID.
func (s *Server) Stop() {
	if s != nil && s.proc != nil {
		s.proc.Stop()
	}
}
