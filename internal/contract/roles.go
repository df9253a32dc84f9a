package contract

import (
	"crypto/tls"
	"crypto/x509"
	"net/url"
	"strings"
)

// ImpersonatorCommonName is the common name of the certificate the hub side (the user-server and the aggregated API)
// presents to an agent's service-proxy inside the tunnel. The service-proxy takes Impersonate-* headers only from a
// client certificate of the signer's CA with this name and ImpersonatorRoleURI: it is how a hub identity reaches a
// managed cluster without the hub credential that proved it.
const ImpersonatorCommonName = "open-cluster-management:cluster-proxy:impersonator"

// Roles the operator writes into its own certificates as a URI SAN. A common name is what anyone allowed to create a
// ProxyCertificate chooses; a role URI is not: the ProxyCertificate API has no URI SANs, the agent CSR review refuses
// them, and the ProxyCertificate controller adds one only to the certificate the issuer renders for that role (its
// name, its Secret, its namespace and its owner). A certificate is trusted for a role only when it carries the URI.
const (
	// ImpersonatorRoleURI marks the impersonator certificate: the one client the service-proxy serves Impersonate-*
	// headers to.
	ImpersonatorRoleURI = "urn:open-cluster-management:cluster-proxy:role:impersonator"
	// ProxyClientRoleURI marks the proxy-client certificate: the hub programs' fleet-wide client of the frontends.
	ProxyClientRoleURI = "urn:open-cluster-management:cluster-proxy:role:proxy-client"
)

// HasRole reports whether cert carries the role URI role among its URI SANs.
func HasRole(cert *x509.Certificate, role string) bool {
	if cert == nil {
		return false
	}
	for _, u := range cert.URIs {
		if u.String() == role {
			return true
		}
	}
	return false
}

// SANURL is uri (a role, or CertificateURI) as the URI SAN a certificate template carries.
func SANURL(uri string) *url.URL {
	u, err := url.Parse(uri)
	if err != nil {
		panic("contract: URI SAN " + uri + " does not parse: " + err.Error())
	}
	return u
}

// VerifiedLeaf is the leaf of the peer's verified chain on a TLS connection, nil when the peer sent no certificate
// or it was not verified (cs nil: not TLS). Every role and identity decision reads this one, never the sent
// certificates.
func VerifiedLeaf(cs *tls.ConnectionState) *x509.Certificate {
	if cs == nil || len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return nil
	}
	return cs.VerifiedChains[0][0]
}

// IsImpersonator reports whether a verified client certificate is the hub's impersonator: its common name and its
// role URI. The name alone is not enough, and neither is a chain to some CA the verifier also trusts.
func IsImpersonator(cert *x509.Certificate) bool {
	return cert != nil && cert.Subject.CommonName == ImpersonatorCommonName && HasRole(cert, ImpersonatorRoleURI)
}

// ReservedCommonName reports whether a certificate with common name cn carries rights beyond a proxy client's (the
// impersonator's, or an agent's for some cluster). Only the operator's own certificates may have such a name.
func ReservedCommonName(cn string) bool {
	return cn == ImpersonatorCommonName || strings.HasPrefix(cn, AgentCommonNamePrefix)
}

// CertificateURIPrefix starts the URI SAN the ProxyCertificate controller writes into every client certificate it
// issues that has no role: CertificateURIPrefix<namespace>/<name> of its ProxyCertificate. A tenant chooses the
// common name and organizations; this URI says where the certificate came from, so the frontends can ask the hub's
// RBAC what that ProxyCertificate may reach (CertificateIdentity).
const CertificateURIPrefix = "urn:open-cluster-management:cluster-proxy:certificate:"

// CertificateURI is the URI SAN of the ProxyCertificate namespace/name.
func CertificateURI(namespace, name string) string {
	return CertificateURIPrefix + namespace + "/" + name
}

// CertificateOf is the ProxyCertificate a verified certificate was issued for, read from its URI SAN.
func CertificateOf(cert *x509.Certificate) (namespace, name string, ok bool) {
	if cert == nil {
		return "", "", false
	}
	for _, u := range cert.URIs {
		rest, found := strings.CutPrefix(u.String(), CertificateURIPrefix)
		if !found {
			continue
		}
		namespace, name, ok = strings.Cut(rest, "/")
		return namespace, name, ok && namespace != "" && name != "" && !strings.Contains(name, "/")
	}
	return "", "", false
}

// The hub identity of a ProxyCertificate's certificate on the frontends: the user the hub's RBAC is asked about, and
// its groups. A hub administrator grants a certificate clusters (get on clusters/proxy, resourceNames) by binding the
// user, or every certificate of a namespace by binding the namespace's group.
const (
	CertificateUserPrefix = "cluster-proxy:certificate:"
	CertificatesGroup     = "cluster-proxy:certificates"
)

// CertificateIdentity is the hub user and groups of the ProxyCertificate namespace/name.
func CertificateIdentity(namespace, name string) (user string, groups []string) {
	return CertificateUserPrefix + namespace + ":" + name, []string{CertificatesGroup, CertificatesGroup + ":" + namespace}
}

// AdoptedProxyClientFlag is the proxy-server flag that names, by the hex SHA-256 fingerprint of its DER, a proxy-client
// certificate the existing add-on issued before the operator took its CA over. Such a certificate carries no role URI;
// it reaches every cluster on the frontends because the manager read it from the proxy-client Secret itself, the one
// hub programs mount, when it adopted the CA that signed it.
const AdoptedProxyClientFlag = "adopted-proxy-client-sha256"
