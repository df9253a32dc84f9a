//go:build integration

package integration

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"time"

	. "github.com/onsi/gomega"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	konnectivity "sigs.k8s.io/apiserver-network-proxy/konnectivity-client/pkg/client"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract"
)

// hubClientTLS is what a hub program holds: the proxy-client certificate and the CA bundle.
func (w *harness) hubClientTLS() *tls.Config {
	w.pki.RLock()
	pair, err := tls.LoadX509KeyPair(w.clientCert, w.clientKey)
	w.pki.RUnlock()
	Expect(err).NotTo(HaveOccurred())
	pool := x509.NewCertPool()
	Expect(pool.AppendCertsFromPEM(must(os.ReadFile(w.bundlePath)))).To(BeTrue())
	return &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
}

// connectedAgents are the agent IDs the proxy-server lists for the cluster (GET /agents on the HTTP-CONNECT port).
func (w *harness) connectedAgents(g Gomega) []string {
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: w.hubClientTLS()}, Timeout: 5 * time.Second}
	resp, err := c.Get("https://" + addr(w.ports.connect) + "/agents")
	g.Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	var body struct {
		Clusters map[string]struct {
			Agents []string `json:"agents"`
		} `json:"clusters"`
	}
	g.Expect(json.NewDecoder(resp.Body).Decode(&body)).To(Succeed())
	return body.Clusters[clusterName].Agents
}

// managedAPIServerTLS verifies the managed kube-apiserver's own certificate, which names 127.0.0.1, not the cluster:
// clients of the raw tunnel set the server name themselves.
func (w *harness) managedAPIServerTLS() *tls.Config {
	pool := x509.NewCertPool()
	Expect(pool.AppendCertsFromPEM(w.managedConf.CAData)).To(BeTrue())
	return &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
}

// grpcGet dials <cluster>:443 with the upstream konnectivity-client through the gRPC frontend and GETs path.
func (w *harness) grpcGet(ctx context.Context, path string) (int, string, error) {
	tunnel, err := konnectivity.CreateSingleUseGrpcTunnelWithContext(ctx, context.Background(), addr(w.ports.frontend),
		grpc.WithTransportCredentials(credentials.NewTLS(w.hubClientTLS())))
	if err != nil {
		return 0, "", fmt.Errorf("create tunnel: %w", err)
	}
	transport := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return tunnel.DialContext(ctx, "tcp", clusterName+":443")
		},
		TLSClientConfig: w.managedAPIServerTLS(),
	}
	defer transport.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+clusterName+path, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := (&http.Client{Transport: transport}).Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// serviceProxyGet sends a plain-HTTP GET of path with headers (name, value pairs) straight to the agent's
// service-proxy, through a tunnel of the gRPC frontend opened with the proxy-client certificate.
func (w *harness) serviceProxyGet(path string, headers ...string) (int, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tunnel, err := konnectivity.CreateSingleUseGrpcTunnelWithContext(ctx, context.Background(), addr(w.ports.frontend),
		grpc.WithTransportCredentials(credentials.NewTLS(w.hubClientTLS())))
	Expect(err).NotTo(HaveOccurred())
	transport := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return tunnel.DialContext(ctx, "tcp", net.JoinHostPort(clusterName, strconv.Itoa(contract.ServiceProxyPort)))
	}}
	defer transport.CloseIdleConnections()
	req := must(http.NewRequestWithContext(ctx, http.MethodGet, "http://"+clusterName+path, nil))
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	resp, err := (&http.Client{Transport: transport}).Do(req)
	Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	body := must(io.ReadAll(resp.Body))
	return resp.StatusCode, string(body)
}

// curl runs the curl binary with args and returns its stdout.
func curl(args ...string) (string, error) {
	out, err := exec.Command("curl", append([]string{"-sS", "--max-time", "10"}, args...)...).Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(out), fmt.Errorf("curl: %w: %s", err, ee.Stderr)
	}
	return string(out), err
}

// curlThroughConnect GETs https://<cluster>:443<path> through the HTTP-CONNECT frontend with mTLS to the frontend.
// The inner TLS skips name verification (-k) because the apiserver's certificate does not name the cluster.
func (w *harness) curlThroughConnect(path string) (string, error) {
	return curl("--proxytunnel", "-x", "https://"+addr(w.ports.connect),
		"--proxy-cacert", w.bundlePath, "--proxy-cert", w.clientCert, "--proxy-key", w.clientKey,
		"-k", "https://"+clusterName+":443"+path)
}

// userServerURL is the user-server address of the cluster.
func (w *harness) userServerURL() string { return "https://" + addr(w.ports.user) + "/" + clusterName }

// userKubeconfig is a kubeconfig that reaches the managed cluster through the user-server with token.
func (w *harness) userKubeconfig(name, token string) string {
	return writeFile("kubeconfigs/"+name, kubeconfig(w.userServerURL(), w.ca.CertPEM, token))
}

// userServerGet GETs path (after /<cluster>) through the user-server with an optional token and extra headers.
func (w *harness) userServerGet(path, token string, headers ...string) (int, string) {
	return w.userServerGetCluster(clusterName, path, token, headers...)
}

func (w *harness) userServerGetCluster(cluster, path, token string, headers ...string) (int, string) {
	code, body, err := w.userServerDo(cluster, path, token, headers...)
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	return code, body
}

// userServerDo is userServerGetCluster returning an error for a request that got no answer, for callers that retry.
func (w *harness) userServerDo(cluster, path, token string, headers ...string) (int, string, error) {
	bundle, err := os.ReadFile(w.bundlePath) // read per request: it changes during a rotation
	if err != nil {
		return 0, "", err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(bundle)
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}, Timeout: 10 * time.Second}
	req, err := http.NewRequest(http.MethodGet, "https://"+addr(w.ports.user)+"/"+cluster+path, nil)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}
