package main

import (
	"context"
	"crypto/tls"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	addonwebhookv1alpha1 "open-cluster-management.io/ocm/pkg/addon/webhook/v1alpha1"
	addonwebhookv1beta1 "open-cluster-management.io/ocm/pkg/addon/webhook/v1beta1"
)

// runWebhook serves OCM's add-on conversion webhook (ManagedClusterAddOn and ClusterManagementAddOn between v1alpha1,
// the stored version, and v1beta1), the webhooks 'addon webhook-server' installs, on a manager like the one it starts.
// Its defaults are the pod's as the cluster-manager operator deploys it; a test on one machine binds it to loopback
// and a port of its own, without the health and metrics listeners.
func runWebhook(ctx context.Context, args []string) error {
	var kubeconfig, host, certDir, healthAddr string
	var port int
	fs := newFlagSet("webhook", &kubeconfig)
	fs.StringVar(&host, "host", "", "Address the webhook server listens on; empty: every address.")
	fs.IntVar(&port, "port", 9443, "Port the webhook server listens on.")
	fs.StringVar(&certDir, "certdir", "/tmp/k8s-webhook-server/serving-certs", "Directory of the serving certificate (tls.crt, tls.key).")
	fs.StringVar(&healthAddr, "health-probe-bind-address", ":8000", "Address of /healthz and /readyz; 0 turns them off.")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := restConfig(kubeconfig, 0, 0)
	if err != nil {
		return err
	}
	scheme := runtime.NewScheme()
	for _, install := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, addonwebhookv1alpha1.Install, addonwebhookv1beta1.Install} {
		if err := install(scheme); err != nil {
			return err
		}
	}
	ctrl.SetLogger(klog.NewKlogr())
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		HealthProbeBindAddress: healthAddr,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		WebhookServer: webhook.NewServer(webhook.Options{Host: host, Port: port, CertDir: certDir,
			TLSOpts: []func(*tls.Config){func(c *tls.Config) { c.MinVersion = tls.VersionTLS12 }}}),
	})
	if err != nil {
		return fmt.Errorf("webhook manager: %w", err)
	}
	if healthAddr != "0" {
		if err := mgr.AddHealthzCheck("healthz-ping", healthz.Ping); err != nil {
			return err
		}
		if err := mgr.AddReadyzCheck("readyz-ping", healthz.Ping); err != nil {
			return err
		}
	}
	for _, w := range []interface{ Init(ctrl.Manager) error }{
		&addonwebhookv1alpha1.ManagedClusterAddOnWebhook{}, &addonwebhookv1beta1.ManagedClusterAddOnWebhook{},
		&addonwebhookv1alpha1.ClusterManagementAddOnWebhook{}, &addonwebhookv1beta1.ClusterManagementAddOnWebhook{},
	} {
		if err := w.Init(mgr); err != nil {
			return fmt.Errorf("install the add-on conversion webhook: %w", err)
		}
	}
	klog.InfoS("Starting OCM's add-on conversion webhook", "host", host, "port", port)
	return mgr.Start(ctx)
}
