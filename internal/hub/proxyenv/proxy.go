package proxyenv

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"unicode"

	corev1 "k8s.io/api/core/v1"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract"
)

const (
	fieldHTTPProxy  = "spec.proxyConfig.httpProxy"
	fieldHTTPSProxy = "spec.proxyConfig.httpsProxy"
	fieldCABundle   = "spec.proxyConfig.caBundle"

	pemTypeCertificate = "CERTIFICATE"
)

// Settings are validated forward-proxy settings.
//
// HTTPProxy and HTTPSProxy are the URLs as written in the AddOnDeploymentConfig (surrounding
// whitespace removed), including any user:password: do not print them; use Redacted for status
// and logs. NoProxy is the normalized comma-separated list (entries trimmed, empty and duplicate
// entries dropped). CABundle holds only the CERTIFICATE blocks of the configured bundle,
// re-encoded as plain PEM (no headers, no text between blocks, duplicates dropped); nil when unset.
type Settings struct {
	HTTPProxy, HTTPSProxy, NoProxy string
	CABundle                       []byte // PEM, only certificates
}

// Redacted returns a copy of s whose proxy URLs show no credentials (contract.RedactProxyURL), for status fields,
// events and logs.
func (s Settings) Redacted() Settings {
	s.HTTPProxy = contract.RedactProxyURL(s.HTTPProxy)
	s.HTTPSProxy = contract.RedactProxyURL(s.HTTPSProxy)
	return s
}

// FromConfig validates an ADC proxyConfig and returns the settings to render. The error, if any,
// is a *FieldError; fields are checked in the order httpProxy, httpsProxy, caBundle.
//
//   - httpProxy/httpsProxy, when set (not empty after trimming whitespace), must be absolute URLs
//     "http://host[:port][/]" or "https://host[:port][/]", optionally with user:password@ before the
//     host. No other path, no query, no fragment, no whitespace; a port must be 1-65535.
//   - caBundle, when set (not empty after trimming whitespace), must be PEM with at least one
//     CERTIFICATE block, every one of them an X.509 certificate, and no block of another type. A
//     private key is refused without echoing it. A caBundle is accepted even when no proxy uses
//     https; TrustBundle then simply does not use it.
//   - noProxy is a comma-separated list; entries are trimmed, empty entries and duplicates (case-insensitive)
//     dropped, keeping the first spelling. Entries are not otherwise validated.
func FromConfig(pc addonv1alpha1.ProxyConfig) (Settings, error) {
	var s Settings
	var err error
	if s.HTTPProxy, err = validateProxyURL(fieldHTTPProxy, pc.HTTPProxy); err != nil {
		return Settings{}, err
	}
	if s.HTTPSProxy, err = validateProxyURL(fieldHTTPSProxy, pc.HTTPSProxy); err != nil {
		return Settings{}, err
	}
	if s.CABundle, err = validateCABundle(pc.CABundle); err != nil {
		return Settings{}, err
	}
	s.NoProxy = strings.Join(mergeLists(splitList(pc.NoProxy)), ",")
	return s, nil
}

// validateProxyURL returns the trimmed URL, "" when unset, or a *FieldError. Messages show the
// URL only through contract.RedactProxyURL and never echo parts that could come from the credentials.
func validateProxyURL(field, raw string) (string, error) {
	v := strings.TrimSpace(raw)
	if v == "" {
		return "", nil
	}
	shown := contract.RedactProxyURL(v)
	hasCreds := shown != v
	const example = "http://proxy.example.com:3128"
	bad := func(format string, args ...any) error {
		return fieldError(field, proxyv1alpha1.ReasonInvalidProxyURL, fmt.Sprintf("proxy URL %q ", shown)+fmt.Sprintf(format, args...))
	}

	if strings.IndexFunc(v, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
		return "", bad("contains whitespace or control characters; write it as a single URL such as %s", example)
	}
	scheme, ok := contract.URLScheme(v)
	if !ok {
		return "", bad("is not an absolute URL; it must start with http:// or https://, e.g. %s", example)
	}
	if scheme = strings.ToLower(scheme); scheme != "http" && scheme != "https" {
		return "", bad("has scheme %q; only http and https forward proxies are supported, e.g. %s", scheme, example)
	}
	u, err := url.Parse(v)
	if err != nil {
		var ue *url.Error
		if !hasCreds && errors.As(err, &ue) {
			return "", bad("is not a valid URL (%v); use the form %s", ue.Err, example)
		}
		// The parser's message may quote part of the credentials; keep it out.
		return "", bad("is not a valid URL; use the form %s and percent-encode special characters in the user name and password", example)
	}
	if u.Hostname() == "" {
		return "", bad("has no host; use the form %s", example)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return "", bad("has an invalid port; a port must be between 1 and 65535")
		}
	}
	if u.Path != "" && u.Path != "/" {
		return "", bad("has a path; a forward proxy URL is only scheme://host[:port], e.g. %s", example)
	}
	if u.RawQuery != "" || u.ForceQuery {
		return "", bad("has a query; a forward proxy URL is only scheme://host[:port], e.g. %s", example)
	}
	if u.Fragment != "" || strings.ContainsRune(v, '#') {
		return "", bad("has a fragment; a forward proxy URL is only scheme://host[:port], e.g. %s", example)
	}
	return v, nil
}

// validateCABundle returns the certificates of data re-encoded as PEM, nil when unset, or a
// *FieldError. It never echoes block contents.
func validateCABundle(data []byte) ([]byte, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, nil
	}
	bad := func(format string, args ...any) error {
		return fieldError(fieldCABundle, proxyv1alpha1.ReasonInvalidProxyCABundle, "proxy CA bundle "+fmt.Sprintf(format, args...))
	}
	const keyAdvice = "; a proxy CA bundle must hold only CA certificates: remove the key from the AddOnDeploymentConfig and consider it exposed"

	var out bytes.Buffer
	seen := map[string]bool{}
	blocks := 0
	for block, rest := pem.Decode(data); block != nil; block, rest = pem.Decode(rest) {
		blocks++
		switch {
		case block.Type == pemTypeCertificate:
			if _, err := x509.ParseCertificate(block.Bytes); err != nil {
				return nil, bad("PEM block %d is a CERTIFICATE that does not parse (%v); provide PEM-encoded X.509 CA certificates", blocks, err)
			}
			if !seen[string(block.Bytes)] {
				seen[string(block.Bytes)] = true
				out.Write(pem.EncodeToMemory(&pem.Block{Type: pemTypeCertificate, Bytes: block.Bytes}))
			}
		case strings.Contains(block.Type, "PRIVATE KEY"):
			return nil, bad("PEM block %d is a private key (%s)%s", blocks, block.Type, keyAdvice)
		default:
			return nil, bad("PEM block %d has type %q; only CERTIFICATE blocks are allowed in a proxy CA bundle", blocks, block.Type)
		}
	}
	// pem.Decode silently skips a block it cannot decode (bad base64, missing END line), so compare
	// with the number of BEGIN lines to catch a truncated or corrupted block.
	begins := bytes.Count(data, []byte("-----BEGIN "))
	switch {
	case begins > blocks && bytes.Contains(data, []byte("PRIVATE KEY-----")):
		return nil, bad("contains a malformed PEM block that looks like a private key%s", keyAdvice)
	case begins > blocks:
		return nil, bad("contains a malformed or truncated PEM block; every block needs matching -----BEGIN CERTIFICATE----- and -----END CERTIFICATE----- lines around valid base64")
	case blocks == 0:
		return nil, bad("is not PEM; provide one or more -----BEGIN CERTIFICATE----- blocks of the CA that signed the proxy's certificate")
	}
	return out.Bytes(), nil
}

// DirectHosts are the names by which an agent reaches its own cluster's kube-apiserver; they must
// never go through the forward proxy. Each call returns a fresh slice.
//
// Note: in-cluster client configuration dials the kube-apiserver by the IP in
// KUBERNETES_SERVICE_HOST, which none of these names covers. A caller that needs that path direct
// can add the literal entry "$(KUBERNETES_SERVICE_HOST)" to alwaysDirect: Env passes alwaysDirect
// through unescaped, and the kubelet expands service environment variables in env values.
func DirectHosts() []string {
	return []string{
		"kubernetes.default.svc",
		"kubernetes.default.svc.cluster.local",
		".svc",
		".cluster.local",
		"localhost",
		"127.0.0.1",
	}
}

// Env returns the environment for the agent container, nil when neither proxy is set. The order
// is fixed: HTTP_PROXY, http_proxy (when HTTPProxy is set), HTTPS_PROXY, https_proxy (when
// HTTPSProxy is set), NO_PROXY, no_proxy (always when a proxy is set, possibly empty).
//
// NO_PROXY is the entries of s.NoProxy followed by those of alwaysDirect, each trimmed, empty
// entries dropped, and duplicates (compared case-insensitively; the first spelling is kept)
// dropped.
//
// The kubelet expands "$(VAR)" and reduces "$$" to "$" in env values, so every '$' coming from
// the AddOnDeploymentConfig (proxy URLs, s.NoProxy) is written as "$$" and reaches the process
// unchanged. alwaysDirect is caller-controlled and passed through as is, so it may use "$(VAR)"
// references on purpose.
func Env(s Settings, alwaysDirect []string) []corev1.EnvVar {
	if s.HTTPProxy == "" && s.HTTPSProxy == "" {
		return nil
	}
	env := make([]corev1.EnvVar, 0, 6)
	add := func(name, value string) {
		env = append(env,
			corev1.EnvVar{Name: name, Value: value},
			corev1.EnvVar{Name: strings.ToLower(name), Value: value})
	}
	if s.HTTPProxy != "" {
		add("HTTP_PROXY", escapeEnv(s.HTTPProxy))
	}
	if s.HTTPSProxy != "" {
		add("HTTPS_PROXY", escapeEnv(s.HTTPSProxy))
	}
	user := splitList(s.NoProxy)
	for i := range user {
		user[i] = escapeEnv(user[i])
	}
	direct := make([]string, 0, len(alwaysDirect))
	for _, d := range alwaysDirect {
		if d = strings.TrimSpace(d); d != "" {
			direct = append(direct, d)
		}
	}
	add("NO_PROXY", strings.Join(mergeLists(user, direct), ","))
	return env
}

// HasCredentials reports whether a proxy URL of s carries credentials (userinfo).
func (s Settings) HasCredentials() bool {
	return contract.RedactProxyURL(s.HTTPProxy) != s.HTTPProxy || contract.RedactProxyURL(s.HTTPSProxy) != s.HTTPSProxy
}

// CredentialData is what the Secret of SecretEnv holds: the proxy URLs as they are (a Secret's values are not
// expanded), by their variable's name.
func CredentialData(s Settings) map[string][]byte {
	data := map[string][]byte{}
	if s.HTTPProxy != "" {
		data["HTTP_PROXY"] = []byte(s.HTTPProxy)
	}
	if s.HTTPSProxy != "" {
		data["HTTPS_PROXY"] = []byte(s.HTTPSProxy)
	}
	return data
}

// SecretEnv is Env with the proxy URLs, which carry credentials, read from the keys of Secret secret
// (CredentialData) instead of written into the container's spec: whoever reads the Deployment or the pod does not
// read the proxy's password.
func SecretEnv(s Settings, alwaysDirect []string, secret string) []corev1.EnvVar {
	env := Env(s, alwaysDirect)
	for i := range env {
		key := strings.ToUpper(env[i].Name)
		if key != "HTTP_PROXY" && key != "HTTPS_PROXY" {
			continue
		}
		env[i].Value = ""
		env[i].ValueFrom = &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: key}}
	}
	return env
}

// escapeEnv makes v literal under kubelet $(VAR) expansion.
func escapeEnv(v string) string {
	return strings.ReplaceAll(v, "$", "$$")
}

// splitList splits a comma-separated list, trimming entries and dropping empty ones.
func splitList(s string) []string {
	var out []string
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

// mergeLists concatenates lists in order, dropping case-insensitive duplicates (host names are
// case-insensitive) and keeping the first spelling.
func mergeLists(lists ...[]string) []string {
	var out []string
	seen := map[string]bool{}
	for _, l := range lists {
		for _, e := range l {
			k := strings.ToLower(e)
			if seen[k] {
				continue
			}
			seen[k] = true
			out = append(out, e)
		}
	}
	return out
}

// TrustBundle is the one bundle a kubeconfig client trusts (client-go verifies an https proxy and the server with the
// same certificate-authority-data, as OCM's bootstrap kubeconfigs do): the certificates of hubBundle, followed by those
// of s.CABundle when the client talks TLS to the proxy (HTTPSProxy or HTTPProxy has scheme https). The proxy-agent does
// not use it: it keeps the hub's roots and the proxy's apart (ProxyTrust).
//
// The result is plain PEM: only CERTIFICATE blocks are kept (headers and text between blocks are
// dropped), and a certificate already present (same DER) is not repeated, so the hub's come
// first. A bundle produced by pem.EncodeToMemory without duplicates comes back byte for byte.
// The result is never nil (empty when there is no certificate at all).
func TrustBundle(hubBundle []byte, s Settings) []byte {
	out := []byte{}
	seen := map[string]bool{}
	out = appendCertificates(out, seen, hubBundle)
	if isHTTPSURL(s.HTTPSProxy) || isHTTPSURL(s.HTTPProxy) {
		out = appendCertificates(out, seen, s.CABundle)
	}
	return out
}

// ProxyTrust is the CA bundle that verifies the forward proxy itself on the TLS hop to it: the certificates of
// s.CABundle when the agent talks TLS to the proxy, else empty. It is trusted for nothing else.
func ProxyTrust(s Settings) []byte { return TrustBundle(nil, s) }

func appendCertificates(out []byte, seen map[string]bool, data []byte) []byte {
	for block, rest := pem.Decode(data); block != nil; block, rest = pem.Decode(rest) {
		if block.Type != pemTypeCertificate || seen[string(block.Bytes)] {
			continue
		}
		seen[string(block.Bytes)] = true
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: pemTypeCertificate, Bytes: block.Bytes})...)
	}
	return out
}

func isHTTPSURL(s string) bool {
	scheme, ok := contract.URLScheme(strings.TrimSpace(s))
	return ok && strings.EqualFold(scheme, "https")
}
