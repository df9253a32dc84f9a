package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/go-logr/logr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"sigs.k8s.io/apiserver-network-proxy/proto/header"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract"
)

// Reasons an agent stream is refused; the values of the refusal metric's reason label.
const (
	RefusalNoCertificate     = "no_client_certificate"
	RefusalNotAgent          = "not_agent_certificate"
	RefusalBadCertificate    = "bad_agent_certificate"
	RefusalBadAgentID        = "bad_agent_id"
	RefusalNoIdentifiers     = contract.IdentifiersMissing
	RefusalMalformed         = contract.IdentifiersMalformed
	RefusalIdentifierType    = contract.IdentifierType
	RefusalForeignIdentifier = contract.IdentifierForeign
)

var refusalReasons = []string{
	RefusalNoCertificate, RefusalNotAgent, RefusalBadCertificate, RefusalBadAgentID,
	RefusalNoIdentifiers, RefusalMalformed, RefusalIdentifierType, RefusalForeignIdentifier,
}

// AgentIdentity is what an accepted agent stream is bound to.
type AgentIdentity struct {
	Cluster   string
	Namespace string // from the agent-namespace OU; empty when the certificate has none
	AgentID   string
	Hosts     []string // the hosts its identifiers claim: the dial addresses it serves
}

// IdentityError says why an agent stream was refused; Reason is one of the Refusal constants. It is the error of
// contract.CheckAgentIdentifiers, so an identifier refusal passes through as it is.
type IdentityError = contract.IdentifierError

func refuse(reason, format string, args ...any) *IdentityError {
	return &IdentityError{Reason: reason, Detail: fmt.Sprintf(format, args...)}
}

// CheckAgentIdentity binds an agent stream to its client certificate: the certificate names the cluster (CN) and the
// agent namespace (OU), and every identifier the agent claims must be host=<cluster> or host=<cluster>.<namespace>
// (contract.CheckAgentIdentifiers, which the agent checks itself against at start-up).
// agentIDs and identifiers are the values of the agentID and agentIdentifiers metadata.
func CheckAgentIdentity(cert *x509.Certificate, agentIDs, identifiers []string) (AgentIdentity, error) {
	var id AgentIdentity
	if cert == nil {
		return id, refuse(RefusalNoCertificate, "the agent presented no verified client certificate")
	}
	cluster, ok := contract.ClusterOfAgentCommonName(cert.Subject.CommonName)
	if !ok {
		return id, refuse(RefusalNotAgent, "common name %q is not an agent's", cert.Subject.CommonName)
	}
	id.Cluster = cluster
	for _, ou := range cert.Subject.OrganizationalUnit {
		ns, found := strings.CutPrefix(ou, contract.AgentNamespaceUnitPrefix)
		if !found {
			continue
		}
		if id.Namespace != "" || ns == "" {
			return id, refuse(RefusalBadCertificate, "the certificate must name exactly one agent namespace")
		}
		id.Namespace = ns
	}
	if len(agentIDs) != 1 || agentIDs[0] == "" {
		return id, refuse(RefusalBadAgentID, "want exactly one agent ID, got %q", agentIDs)
	}
	id.AgentID = agentIDs[0]

	if len(identifiers) == 0 {
		return id, refuse(RefusalNoIdentifiers, "the agent claims no identifiers")
	}
	if len(identifiers) > 1 {
		return id, refuse(RefusalMalformed, "want one set of identifiers, got %d", len(identifiers))
	}
	hosts, err := contract.CheckAgentIdentifiers(cluster, id.Namespace, identifiers[0])
	id.Hosts = hosts
	return id, err
}

// verifiedPeerCertificate is the leaf of the peer's verified chain, nil when the peer was not verified.
func verifiedPeerCertificate(ctx context.Context) *x509.Certificate {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return nil
	}
	return contract.VerifiedLeaf(&info.State)
}

// admitAgent decides whether an agent stream may become a backend: it refuses streams whose identifiers the
// certificate does not back (PermissionDenied), and streams of agents that already hold a tunnel to this server
// (contract.HeldServersMetadata; AlreadyExists). It returns the checked identity.
func admitAgent(ctx context.Context, serverID string, log logr.Logger) (AgentIdentity, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	agentIDs, identifiers := md.Get(header.AgentID), md.Get(header.AgentIdentifiers)
	id, err := CheckAgentIdentity(verifiedPeerCertificate(ctx), agentIDs, identifiers)
	if err != nil {
		reason := RefusalMalformed
		var ie *IdentityError
		if errors.As(err, &ie) {
			reason = ie.Reason
		}
		identityRefusals.WithLabelValues(reason).Inc()
		remote := ""
		if p, ok := peer.FromContext(ctx); ok {
			remote = p.Addr.String()
		}
		log.Info("Refused agent stream", "cluster", id.Cluster, "agentID", agentIDs, "identifiers", identifiers,
			"reason", reason, "detail", err.Error(), "remote", remote)
		return id, status.Errorf(codes.PermissionDenied, "agent identity refused: %v", err)
	}
	if slices.Contains(md.Get(contract.HeldServersMetadata), serverID) {
		duplicateRefusals.Inc()
		log.V(1).Info("Refused an agent stream: the agent holds a tunnel to this server already", "cluster", id.Cluster, "agentID", id.AgentID)
		return id, status.Errorf(codes.AlreadyExists, "agent %s of cluster %s holds a tunnel to proxy-server %s already", id.AgentID, id.Cluster, serverID)
	}
	return id, nil
}

// refuseNonClientCertificates keeps certificates of the signer that are not proxy clients off the frontends: an
// agent's (signed by the same CA; an agent may serve its own cluster, never reach others) and the impersonator's (its
// key vouches for hub users to the service-proxies; on a frontend it would be a key to every cluster that no hub
// RBAC ever looks at). The TLS handshake has already refused a certificate without the client-auth usage.
func refuseNonClientCertificates(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return nil
	}
	leaf := cs.PeerCertificates[0]
	if cluster, ok := contract.ClusterOfAgentCommonName(leaf.Subject.CommonName); ok {
		return fmt.Errorf("the agent certificate of cluster %q may not use the proxy frontends", cluster)
	}
	if leaf.Subject.CommonName == contract.ImpersonatorCommonName || contract.HasRole(leaf, contract.ImpersonatorRoleURI) {
		return errors.New("the impersonator certificate may not use the proxy frontends")
	}
	return nil
}
