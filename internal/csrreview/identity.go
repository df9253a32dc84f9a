package csrreview

import (
	"fmt"
	"net/url"
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
// the agent's certificate names: every host it claims must be <cluster> or <cluster>.<namespace>.
func CheckAgentIdentifiers(cluster, namespace, identifiers string) error {
	hosts, err := AgentIdentifierHosts(identifiers)
	if err != nil {
		return err
	}
	for _, h := range hosts {
		if h != cluster && (namespace == "" || h != cluster+"."+namespace) {
			return refuseIdentifiers(IdentifierForeign, "host %q does not belong to cluster %q", h, cluster)
		}
	}
	return nil
}
