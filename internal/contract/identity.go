package contract

import (
	"fmt"
	"net/url"
	"strings"
)

// Reasons an agent's identifiers are refused; the proxy-server counts its refusals by them.
const (
	IdentifiersMissing   = "no_identifiers"
	IdentifiersMalformed = "malformed_identifiers"
	IdentifierType       = "identifier_type"
	IdentifierForeign    = "foreign_identifier"
)

// hostIdentifier is the only identifier type an agent may claim (ANP's header.Host).
const hostIdentifier = "host"

// IdentifierError says why an agent's identifiers are refused; Reason is one of the constants above. The
// proxy-server also uses it, as server.IdentityError, for its certificate refusals, with reasons of its own.
type IdentifierError struct {
	Reason string
	Detail string
}

func (e *IdentifierError) Error() string { return e.Reason + ": " + e.Detail }

func refuseIdentifiers(reason, format string, args ...any) *IdentifierError {
	return &IdentifierError{Reason: reason, Detail: fmt.Sprintf(format, args...)}
}

// AgentIdentifierHosts returns the hosts an agentIdentifiers value ("host=<name>&host=<name>") claims, in order.
// Host is the only identifier type an agent may use, and it must claim at least one.
func AgentIdentifierHosts(identifiers string) ([]string, error) {
	claimed, err := url.ParseQuery(identifiers)
	if err != nil {
		return nil, refuseIdentifiers(IdentifiersMalformed, "%v", err)
	}
	for kind := range claimed {
		if kind != hostIdentifier {
			return nil, refuseIdentifiers(IdentifierType, "identifier type %q is not allowed, only %q", kind, hostIdentifier)
		}
	}
	hosts := claimed[hostIdentifier]
	if len(hosts) == 0 {
		return nil, refuseIdentifiers(IdentifiersMissing, "the agent claims no identifiers")
	}
	return hosts, nil
}

// CheckAgentIdentifiers checks an agentIdentifiers value against the cluster and agent namespace (empty for none)
// the agent's certificate names: every host it claims must be <cluster> or <cluster>.<namespace>. It returns the
// hosts.
func CheckAgentIdentifiers(cluster, namespace, identifiers string) ([]string, error) {
	hosts, err := AgentIdentifierHosts(identifiers)
	if err != nil {
		return nil, err
	}
	for _, h := range hosts {
		if h != cluster && (namespace == "" || h != cluster+"."+namespace) {
			return nil, refuseIdentifiers(IdentifierForeign, "host %q does not belong to cluster %q", h, cluster)
		}
	}
	return hosts, nil
}

// AgentIdentifiers are the names an agent registers for its cluster: host=<cluster> and host=<cluster>.<namespace>.
func AgentIdentifiers(cluster, namespace string) string {
	return "host=" + cluster + "&host=" + cluster + "." + namespace
}

// AgentCommonNamePrefix starts the common name of every agent certificate; the cluster name follows, so the
// proxy-server can tell from a client certificate which cluster an agent belongs to.
const AgentCommonNamePrefix = "open-cluster-management:cluster-proxy:agent:"

// AgentCertificateGroup is the organization of every agent certificate.
const AgentCertificateGroup = "open-cluster-management:cluster-proxy"

// AgentSubject is the subject agents request for their client certificate. The organizational unit names the signing
// CA, so rotating the CA changes the subject and makes OCM's klusterlet request a new certificate.
type AgentSubject struct {
	CommonName          string
	Organizations       []string
	OrganizationalUnits []string
}

// AgentNamespaceUnitPrefix starts the organizational unit that names the agent's install namespace, so the
// proxy-server can check the host=<cluster>.<namespace> identifier against the certificate too.
const AgentNamespaceUnitPrefix = "agent-namespace:"

// AgentCertificateSubject is the subject of cluster's agent certificate, for an agent installed in namespace, under
// the CA with caFingerprint.
func AgentCertificateSubject(cluster, namespace, caFingerprint string) AgentSubject {
	ou := strings.TrimPrefix(caFingerprint, "SHA256:")
	if len(ou) > 16 {
		ou = ou[:16]
	}
	return AgentSubject{
		CommonName:          AgentCommonNamePrefix + cluster,
		Organizations:       []string{AgentCertificateGroup},
		OrganizationalUnits: []string{"signer-" + ou, AgentNamespaceUnitPrefix + namespace},
	}
}

// AgentNamespaceOfUnits returns the agent install namespace named in a certificate's organizational units, or false.
func AgentNamespaceOfUnits(units []string) (string, bool) {
	for _, u := range units {
		if ns, ok := strings.CutPrefix(u, AgentNamespaceUnitPrefix); ok && ns != "" {
			return ns, true
		}
	}
	return "", false
}

// ClusterOfAgentCommonName returns the cluster an agent certificate was issued to, or false.
func ClusterOfAgentCommonName(cn string) (string, bool) {
	cluster, ok := strings.CutPrefix(cn, AgentCommonNamePrefix)
	return cluster, ok && cluster != ""
}
