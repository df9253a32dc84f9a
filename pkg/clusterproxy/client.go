// Package clusterproxy lets hub programs reach managed clusters by name through the cluster-proxy tunnels: a dialer
// and a *rest.Config for any managed cluster whose proxy-agent is connected, a health probe, and the list of
// connected agents.
//
// It reads what it needs from the hub, as `clusteradm proxy health` and cluster-gateway do: the
// ManagedProxyConfiguration (namespace, Service name, ports) and the proxy-client certificate and CA bundle
// Secrets. Connections go to the proxy-server's gRPC frontend (proxy-entrypoint.<ns>.svc:8090) with mutual TLS,
// one konnectivity tunnel per connection. Outside the hub cluster, map the in-cluster names with Options.Resolve.
//
// The certificates are read again while the Client is used, so a renewed proxy-client certificate or a rotated
// CA is picked up without a new Client.
package clusterproxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/tlsreload"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/tunnelclient"
)

const (
	// KubeAPIServerPort (443) is the tunnel port an agent maps to its cluster's kube-apiserver.
	KubeAPIServerPort = tunnelclient.KubeAPIServerPort
	// ServiceProxyPort (7443) is the tunnel port of the agent's service-proxy (plain HTTP/1.1 inside the tunnel), as
	// the agents are rendered with.
	ServiceProxyPort = contract.ServiceProxyPort
	// DefaultCredentialsTTL is how long Secrets read through a hub rest.Config are reused.
	DefaultCredentialsTTL = time.Minute
	// DefaultNoAgentWait is Options.NoAgentWait's default: as long as client-go waits for a cluster through the
	// user-server (ten retries a second apart).
	DefaultNoAgentWait = tunnelclient.DefaultNoAgentWait
)

// ErrNoConfiguration is wrapped by New's error when the ManagedProxyConfiguration does not exist.
var ErrNoConfiguration = errors.New("no ManagedProxyConfiguration")

// Options configure a Client.
type Options struct {
	// Configuration names the ManagedProxyConfiguration; empty means the default, cluster-proxy.
	Configuration string
	// Resolve overrides where in-cluster addresses are dialed (host:port to addr:port).
	Resolve Resolver
	// Reader, when set, reads the configuration and the Secrets instead of a client built from the hub
	// rest.Config; a controller-runtime manager passes its cached client, so a dial costs no API request.
	Reader client.Reader
	// CredentialsTTL is how long the Secrets are reused before they are read again: default DefaultCredentialsTTL
	// with a hub rest.Config, 0 (read on every connection) with a Reader.
	CredentialsTTL time.Duration
	// NoAgentWait is how long a dial waits for an agent of a cluster that has none connected, as while its agents
	// reconnect (their forward proxy restarted, their pods replaced): default DefaultNoAgentWait; a negative value
	// fails such a dial after the few attempts that follow at once. The dial's context bounds it too.
	NoAgentWait time.Duration
}

// Client reaches managed clusters through the proxy-servers of one ManagedProxyConfiguration.
type Client struct {
	// In-cluster addresses; Resolve may map them elsewhere.
	addrs       Addresses
	resolve     Resolver
	creds       *hubCredentials
	noAgentWait time.Duration
}

// Addresses are where the hub cluster serves a ManagedProxyConfiguration's proxy-servers and user-server: in-cluster
// Service names, each host:port.
type Addresses struct {
	// Namespace holds the proxy-servers, the user-server and their Secrets.
	Namespace string
	// Frontend is the proxy-servers' gRPC frontend, HTTPConnect their HTTP-CONNECT listener (GET /agents).
	Frontend, HTTPConnect string
	// UserServer is the user-server, which kubectl reaches as https://<UserServer>/<cluster>.
	UserServer string
}

// AddressesOf are the addresses of mpc's proxy-servers and user-server.
func AddressesOf(mpc *proxyv1alpha1.ManagedProxyConfiguration) Addresses {
	ns, ports := contract.Namespace(mpc), contract.PortsOf(mpc)
	host := contract.ServiceHost(mpc)
	return Addresses{
		Namespace:   ns,
		Frontend:    net.JoinHostPort(host, strconv.Itoa(int(ports.ProxyServer))),
		HTTPConnect: net.JoinHostPort(host, strconv.Itoa(int(ports.HTTPConnectServer))),
		UserServer:  contract.UserServerAddress(mpc),
	}
}

// New reads the ManagedProxyConfiguration and the proxy-client credentials from the hub. hubConfig is used only when
// opts.Reader is nil. The error wraps ErrNoConfiguration (and the API's NotFound) when the configuration does not
// exist, and names the Secret that is missing or invalid.
func New(ctx context.Context, hubConfig *rest.Config, opts Options) (*Client, error) {
	reader, ttl := opts.Reader, time.Duration(0)
	if reader == nil {
		if hubConfig == nil {
			return nil, errors.New("clusterproxy: a hub rest.Config or a Reader is required")
		}
		c, err := client.New(hubConfig, client.Options{Scheme: hubScheme()})
		if err != nil {
			return nil, fmt.Errorf("clusterproxy: hub client for %s: %w", hubConfig.Host, err)
		}
		reader, ttl = c, DefaultCredentialsTTL
	}
	if opts.CredentialsTTL != 0 {
		ttl = max(opts.CredentialsTTL, 0)
	}
	name := opts.Configuration
	if name == "" {
		name = proxyv1alpha1.DefaultConfigurationName
	}
	mpc := &proxyv1alpha1.ManagedProxyConfiguration{}
	if err := reader.Get(ctx, client.ObjectKey{Name: name}, mpc); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("%w %q on the hub: %w", ErrNoConfiguration, name, err)
		}
		return nil, fmt.Errorf("read ManagedProxyConfiguration %q from the hub: %w", name, err)
	}
	addrs := AddressesOf(mpc)
	c := &Client{
		addrs:       addrs,
		resolve:     opts.Resolve,
		noAgentWait: opts.NoAgentWait,
		creds: &hubCredentials{
			reader: reader, namespace: addrs.Namespace, clientSecret: contract.SecretNamesOf(mpc).ProxyClient, ttl: ttl,
		},
	}
	if _, err := c.creds.get(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// FrontendAddress is the in-cluster address of the proxy-servers' gRPC frontend, host:port.
func (c *Client) FrontendAddress() string { return c.addrs.Frontend }

// tlsConfig presents the current proxy-client certificate and trusts the current CA bundle for serverName.
func (c *Client) tlsConfig(ctx context.Context, serverName string) (*tls.Config, error) {
	m, err := c.creds.get(ctx)
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		ServerName:   serverName,
		Certificates: []tls.Certificate{*m.Cert},
		RootCAs:      m.Pool,
	}, nil
}

func hubScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := corev1.AddToScheme(s); err != nil {
		panic(err) // compiled-in kinds: only a programming error fails
	}
	if err := proxyv1alpha1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}

// hubCredentials are the proxy-client certificate and the CA bundle, read from their Secrets and parsed only when
// their content changed.
type hubCredentials struct {
	reader                  client.Reader
	namespace, clientSecret string
	ttl                     time.Duration

	mu     sync.Mutex
	cur    *tlsreload.Material
	readAt time.Time
}

func (h *hubCredentials) get(ctx context.Context) (*tlsreload.Material, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cur != nil && h.ttl > 0 && time.Since(h.readAt) < h.ttl {
		return h.cur, nil
	}
	clientSecret, err := h.secret(ctx, h.clientSecret)
	if err != nil {
		return nil, err
	}
	bundle, err := h.secret(ctx, proxyv1alpha1.CABundleSecretName)
	if err != nil {
		return nil, err
	}
	m, _, err := tlsreload.Parse(h.cur, tlsreload.PEM{
		Cert: clientSecret.Data[corev1.TLSCertKey], Key: clientSecret.Data[corev1.TLSPrivateKeyKey], CA: bundle.Data["ca.crt"],
		PairName: fmt.Sprintf("tls.crt, tls.key of secret %s/%s", h.namespace, h.clientSecret),
		CAName:   fmt.Sprintf("ca.crt of secret %s/%s", h.namespace, proxyv1alpha1.CABundleSecretName),
	})
	if err != nil {
		return nil, err
	}
	h.cur, h.readAt = m, time.Now()
	return h.cur, nil
}

func (h *hubCredentials) secret(ctx context.Context, name string) (*corev1.Secret, error) {
	s := &corev1.Secret{}
	if err := h.reader.Get(ctx, client.ObjectKey{Namespace: h.namespace, Name: name}, s); err != nil {
		return nil, fmt.Errorf("read secret %s/%s from the hub: %w", h.namespace, name, err)
	}
	return s, nil
}
