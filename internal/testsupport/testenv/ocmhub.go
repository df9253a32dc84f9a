package testenv

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/process"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/repo"
)

// OCMRelease names the OCM release whose hub an envtest hub stands for.
type OCMRelease string

const (
	// OCM10 serves the add-on API as v1alpha1 only, as OCM v1.0 does: the CRDs of open-cluster-management.io/api's
	// v1alpha1 folders, and sigs.k8s.io/cluster-inventory-api's ClusterProfile.
	OCM10 OCMRelease = "v1.0"
	// OCM12 serves v1alpha1 and v1beta1, stores v1alpha1 and converts through OCM's own conversion webhook, as OCM
	// v1.2 does: the hub CRDs of open-cluster-management.io/ocm v1.2.0 as its operator renders them (ClusterProfile
	// included), and the webhook as a process of bin/ocm-local (make ocm-local).
	OCM12 OCMRelease = "v1.2"
)

// OCMReleaseEnv chooses the release of OCMReleaseFromEnv.
const OCMReleaseEnv = "OCM_HUB_RELEASE"

// OCMReleaseFromEnv is the release OCM_HUB_RELEASE names, OCM12 when it is unset.
func OCMReleaseFromEnv() (OCMRelease, error) {
	switch r := OCMRelease(os.Getenv(OCMReleaseEnv)); r {
	case "":
		return OCM12, nil
	case OCM10, OCM12:
		return r, nil
	default:
		return "", fmt.Errorf("%s=%q: want %q or %q", OCMReleaseEnv, r, OCM10, OCM12)
	}
}

// Hub is an envtest hub with the operator's CRDs and the hub CRDs of one OCM release, and for OCM12 the add-on
// conversion webhook, which starts with it and stops before it.
type Hub struct {
	*envtest.Environment
	Release OCMRelease
	dir     string // logs
	// The webhook's address and certificates, apart from the environment's own webhook options: envtest drops the
	// conversion webhook of every CRD it installs whose kinds its scheme cannot convert, which OCM's are.
	webhookOpts envtest.WebhookInstallOptions
	ocmCRDs     string // the folder of OCM's rendered hub CRDs, installed after the control plane starts
	webhook     *process.Process
}

// NewHubOf returns a hub of release that is not started yet; the webhook's log goes to dir.
func NewHubOf(release OCMRelease, dir string) (*Hub, error) {
	h := &Hub{Release: release, dir: dir}
	switch release {
	case OCM10:
		env, err := NewHub()
		if err != nil {
			return nil, err
		}
		h.Environment = env
		return h, nil
	case OCM12:
		env, err := newEnvironment([]string{filepath.Join(repo.Root(), "config", "crd", "bases")}, nil)
		if err != nil {
			return nil, err
		}
		h.Environment = env
		// A CA, a serving certificate and a port reserved for the webhook.
		h.webhookOpts = envtest.WebhookInstallOptions{LocalServingHost: "127.0.0.1"}
		if err := h.webhookOpts.PrepWithoutInstalling(); err != nil {
			return nil, err
		}
		if h.ocmCRDs, err = renderOCMHubCRDs(dir, h.webhookOpts); err != nil {
			return nil, errors.Join(err, h.webhookOpts.Cleanup())
		}
		return h, nil
	default:
		return nil, fmt.Errorf("no OCM release %q", release)
	}
}

// renderOCMHubCRDs writes OCM's hub CRDs, their conversion webhook at opts' address, to a folder of dir.
func renderOCMHubCRDs(dir string, opts envtest.WebhookInstallOptions) (string, error) {
	ca := filepath.Join(dir, "ocm-webhook-ca.crt")
	if err := os.WriteFile(ca, opts.LocalServingCAData, 0o600); err != nil {
		return "", err
	}
	crds := filepath.Join(dir, "ocm-hub-crds")
	url := "https://" + net.JoinHostPort(opts.LocalServingHost, strconv.Itoa(opts.LocalServingPort)) + "/convert"
	out, err := exec.Command(repo.OCMLocal(), "crds", "hub", crds, "--ca-bundle-file", ca, "--webhook-url", url).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s crds hub (make ocm-local): %w: %s", repo.OCMLocal(), err, out)
	}
	return crds, nil
}

// Start starts the control plane and installs OCM's CRDs, then starts the webhook, and returns once it serves.
func (h *Hub) Start() (*rest.Config, error) {
	cfg, err := h.Environment.Start()
	if err != nil || h.Release != OCM12 {
		return cfg, err
	}
	crds, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{Paths: []string{h.ocmCRDs}, ErrorIfPathMissing: true})
	if err != nil {
		return nil, fmt.Errorf("install OCM's hub CRDs: %w", err)
	}
	h.CRDs = append(h.CRDs, crds...)
	opts := h.webhookOpts
	kubeconfig, err := AdminKubeconfig(h.Environment, "ocm-addon-webhook", filepath.Join(h.dir, "ocm-addon-webhook.kubeconfig"))
	if err != nil {
		return nil, err
	}
	h.webhook, err = process.Run(process.Command{Path: repo.OCMLocal(), LogPath: filepath.Join(h.dir, "ocm-addon-webhook.log"),
		Args: []string{"webhook", "--kubeconfig=" + kubeconfig, "--host=" + opts.LocalServingHost,
			"--port=" + strconv.Itoa(opts.LocalServingPort), "--certdir=" + opts.LocalServingCertDir, "--health-probe-bind-address=0"}})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := h.waitForWebhook(ctx); err != nil {
		return nil, errors.Join(err, h.Stop())
	}
	return cfg, nil
}

// waitForWebhook waits until the webhook completes a TLS handshake with its CA, or it exits, or ctx ends.
func (h *Hub) waitForWebhook(ctx context.Context) error {
	opts := h.webhookOpts
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(opts.LocalServingCAData)
	dialer := &tls.Dialer{Config: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}
	addr := net.JoinHostPort(opts.LocalServingHost, strconv.Itoa(opts.LocalServingPort))
	for {
		conn, err := dialer.DialContext(ctx, "tcp", addr)
		if err == nil {
			return conn.Close()
		}
		select {
		case <-h.webhook.Done():
			return fmt.Errorf("OCM's add-on webhook ended (%s): see %s", h.webhook.ExitDescription(), h.webhook.LogPath())
		case <-ctx.Done():
			return fmt.Errorf("OCM's add-on webhook does not serve at %s: %w (see %s)", addr, err, h.webhook.LogPath())
		case <-time.After(50 * time.Millisecond): // nothing to watch but the port
		}
	}
}

// Stop stops the webhook, then the control plane.
func (h *Hub) Stop() error {
	var errs []error
	if h.webhook != nil {
		h.webhook.Terminate(5 * time.Second)
		h.webhook = nil
	}
	if h.Release == OCM12 {
		errs = append(errs, h.webhookOpts.Cleanup())
	}
	return errors.Join(append(errs, h.Environment.Stop())...)
}
