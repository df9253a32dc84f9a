package serviceproxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/review"
)

// OIDC accepts OpenID Connect ID tokens of one issuer and maps them to an impersonated user, as a kube-apiserver's
// --oidc-* flags do. Tokens the cluster and the hub both reject are tried here last.
type OIDC struct {
	// IssuerURL is the issuer (https); its discovery document and keys are fetched from it.
	IssuerURL string
	// ClientID is the audience the tokens must carry.
	ClientID string
	// UsernameClaim names the user (default "sub"). With "email", a present email_verified claim must be true.
	UsernameClaim string
	// UsernamePrefix goes before the user name: "" means the issuer URL and '#' for claims other than email (none for
	// email), "-" means none.
	UsernamePrefix string
	// GroupsClaim names the groups (a string or a list of strings); "" maps none. GroupsPrefix goes before each.
	GroupsClaim, GroupsPrefix string
	// ReservedPrefixes are refused as the start of a mapped user or group name; nil means "system:", empty means none.
	ReservedPrefixes []string
	// CAFile, when set, is the PEM CA bundle the issuer is verified with instead of the system roots (a ConfigMap
	// volume); a change is picked up without a restart.
	CAFile string
	// SigningAlgs are the accepted JOSE signing algorithms (default RS256).
	SigningAlgs []string
	// RequiredClaims must appear in the token with these string values.
	RequiredClaims map[string]string
	// Dial, when set, opens every connection to the issuer, forward proxy included (the agent's tunnel dialer: an
	// https proxy is verified with the agent's bundle, the issuer inside with CAFile). Unset, the issuer is dialed
	// directly with Options.DialContext. The proxy of the environment is never used: net/http would verify an https
	// proxy with CAFile, the issuer's CA.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// oidcCACheckInterval is how often, at most, the CA file is read again.
const oidcCACheckInterval = 5 * time.Second

// oidcAuthenticator verifies tokens with the issuer's keys. Discovery is done on the first token and again when the
// CA file changes; a failed discovery is retried by the next token, never cached.
type oidcAuthenticator struct {
	cfg  OIDC
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
	now  func() time.Time

	mu       sync.Mutex
	ca       []byte // the CA file content the verifier trusts
	checked  time.Time
	verifier *oidc.IDTokenVerifier
}

func newOIDCAuthenticator(cfg OIDC, dial func(ctx context.Context, network, addr string) (net.Conn, error), now func() time.Time) (*oidcAuthenticator, error) {
	if !strings.HasPrefix(cfg.IssuerURL, "https://") {
		return nil, fmt.Errorf("serviceproxy: OIDC issuer URL %q must be an https URL", cfg.IssuerURL)
	}
	if cfg.ClientID == "" {
		return nil, errors.New("serviceproxy: an OIDC client ID is required with an issuer URL")
	}
	if cfg.UsernameClaim == "" {
		cfg.UsernameClaim = "sub"
	}
	if cfg.ReservedPrefixes == nil {
		cfg.ReservedPrefixes = []string{"system:"}
	}
	for i, p := range cfg.ReservedPrefixes {
		if p == "" {
			return nil, fmt.Errorf("serviceproxy: OIDC reserved prefix %d is empty", i)
		}
	}
	if len(cfg.SigningAlgs) == 0 {
		cfg.SigningAlgs = []string{oidc.RS256}
	}
	return &oidcAuthenticator{cfg: cfg, dial: dial, now: now}, nil
}

// current is the verifier for the CA in force, discovering the issuer when there is none yet or the CA changed.
func (a *oidcAuthenticator) current(ctx context.Context) (*oidc.IDTokenVerifier, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.now()
	if a.verifier != nil && (a.cfg.CAFile == "" || now.Sub(a.checked) < oidcCACheckInterval) {
		return a.verifier, nil
	}
	var ca []byte
	if a.cfg.CAFile != "" {
		var err error
		if ca, err = os.ReadFile(a.cfg.CAFile); err != nil {
			return nil, fmt.Errorf("read the OIDC CA file: %w", err)
		}
		a.checked = now
		if a.verifier != nil && bytes.Equal(ca, a.ca) {
			return a.verifier, nil
		}
	}
	var roots *x509.CertPool // nil: the system roots
	if ca != nil {
		roots = x509.NewCertPool()
		if !roots.AppendCertsFromPEM(ca) {
			return nil, fmt.Errorf("the OIDC CA file %s holds no PEM certificate", a.cfg.CAFile)
		}
	}
	dial := a.cfg.Dial
	if dial == nil {
		dial = a.dial
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext:     dial,
		TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots},
		// Keys are fetched rarely: an idle connection (through a forward proxy, a tunnel there) is not kept open.
		IdleConnTimeout: 90 * time.Second,
	}}
	provider, err := oidc.NewProvider(oidc.ClientContext(ctx, client), a.cfg.IssuerURL)
	if err != nil {
		return nil, fmt.Errorf("OIDC discovery at %s: %w", a.cfg.IssuerURL, err)
	}
	// The key set keeps this context for fetching keys later, beyond the request that discovered the issuer.
	a.verifier = provider.VerifierContext(oidc.ClientContext(context.Background(), client), &oidc.Config{
		ClientID: a.cfg.ClientID, SupportedSigningAlgs: a.cfg.SigningAlgs, Now: a.now,
	})
	a.ca = ca
	return a.verifier, nil
}

// authenticate maps an ID token to an identity. A token that is not a valid ID token of the issuer, or whose claims
// do not qualify, is a rejection; an error means the issuer could not be asked (the caller answers 503).
func (a *oidcAuthenticator) authenticate(ctx context.Context, token string) (review.Identity, error) {
	if strings.Count(token, ".") != 2 {
		return review.Identity{}, nil // not a JWT
	}
	verifier, err := a.current(ctx)
	if err != nil {
		return review.Identity{}, err
	}
	idToken, err := verifier.Verify(ctx, token)
	if err != nil {
		logger.V(1).Info("OIDC token rejected", "reason", err.Error())
		return review.Identity{}, nil
	}
	var claims map[string]any
	if err := idToken.Claims(&claims); err != nil {
		return review.Identity{}, nil
	}
	user, groups, refusal := a.mapClaims(claims)
	if refusal != "" {
		logger.Info("OIDC token refused", "reason", refusal)
		return review.Identity{}, nil
	}
	return review.Identity{Authenticated: true, User: user, Groups: groups}, nil
}

// mapClaims is the user and groups of the claims, or why they do not qualify.
func (a *oidcAuthenticator) mapClaims(claims map[string]any) (user string, groups []string, refusal string) {
	for k, want := range a.cfg.RequiredClaims {
		if got, ok := claims[k].(string); !ok || got != want {
			return "", nil, fmt.Sprintf("claim %q does not have the required value", k)
		}
	}
	name, ok := claims[a.cfg.UsernameClaim].(string)
	if !ok || name == "" {
		return "", nil, fmt.Sprintf("no string claim %q for the user name", a.cfg.UsernameClaim)
	}
	if a.cfg.UsernameClaim == "email" {
		if verified, present := claims["email_verified"]; present && verified != true {
			return "", nil, "email_verified is not true"
		}
	}
	switch prefix := a.cfg.UsernamePrefix; {
	case prefix == "-":
	case prefix != "":
		name = prefix + name
	case a.cfg.UsernameClaim != "email":
		name = a.cfg.IssuerURL + "#" + name
	}
	if a.cfg.GroupsClaim != "" {
		switch v := claims[a.cfg.GroupsClaim].(type) {
		case string:
			groups = []string{v}
		case []any:
			for _, g := range v {
				s, ok := g.(string)
				if !ok {
					return "", nil, fmt.Sprintf("claim %q holds a group that is not a string", a.cfg.GroupsClaim)
				}
				groups = append(groups, s)
			}
		case nil:
		default:
			return "", nil, fmt.Sprintf("claim %q is neither a string nor a list of strings", a.cfg.GroupsClaim)
		}
		for i := range groups {
			groups[i] = a.cfg.GroupsPrefix + groups[i]
		}
	}
	for _, reserved := range a.cfg.ReservedPrefixes {
		if strings.HasPrefix(name, reserved) {
			return "", nil, fmt.Sprintf("the user name starts with the reserved prefix %q", reserved)
		}
		for _, g := range groups {
			if strings.HasPrefix(g, reserved) {
				return "", nil, fmt.Sprintf("a group starts with the reserved prefix %q", reserved)
			}
		}
	}
	return name, groups, ""
}
