package server

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/go-logr/logr"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/server/audit"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/server/hubidentity"
)

// Reasons a frontend dial is refused; the values of the refusal metric's reason label.
const (
	FrontendRefusalNoIdentity = "no_identity"
	FrontendRefusalDenied     = "denied"
	FrontendRefusalHub        = "hub_unavailable"
)

var frontendRefusalReasons = []string{FrontendRefusalNoIdentity, FrontendRefusalDenied, FrontendRefusalHub}

// frontendAccess decides which clusters a client of the gRPC and HTTP-CONNECT frontends may reach, from its verified
// client certificate (the TLS handshake has already refused agents, the impersonator and certificates of another CA):
//   - the operator's proxy-client (its role URI): every cluster, as hub programs of the existing add-on expect;
//   - a proxy-client certificate the existing add-on issued, named by its fingerprint (Options.AdoptedProxyClients):
//     every cluster, since the hub programs that mount proxy-client may hold it in memory from before the switch;
//   - the certificate of a ProxyCertificate (the URI the issuer writes, contract.CertificateURI): the clusters the
//     hub's RBAC lets its identity (contract.CertificateIdentity) get clusters/proxy of;
//   - any other: none.
//
// No decision rests on a name the holder chose.
type frontendAccess struct {
	hub     hubidentity.ClusterAuthorizer // nil: only the proxy-client
	adopted map[[sha256.Size]byte]bool
	log     logr.Logger
	audit   *audit.Auditor // records every decision; nil records none
}

// The frontends, as the audit events name the way in.
const (
	viaGRPC        = "grpc"
	viaHTTPConnect = "http-connect"
)

func newFrontendAccess(hub hubidentity.ClusterAuthorizer, adopted [][sha256.Size]byte, auditor *audit.Auditor, log logr.Logger) *frontendAccess {
	a := &frontendAccess{hub: hub, adopted: make(map[[sha256.Size]byte]bool, len(adopted)), audit: auditor, log: log}
	for _, fp := range adopted {
		a.adopted[fp] = true
	}
	return a
}

// fleetWide reports whether cert may reach every cluster: the operator's proxy-client.
func fleetWide(cert *x509.Certificate) bool {
	return contract.HasRole(cert, contract.ProxyClientRoleURI)
}

// check admits cert to cluster through the frontend via, or says why not with an *accessError; the audit records the
// decision either way (a dial's bytes and length are the agent's and the client's business: the event is the dial's).
func (a *frontendAccess) check(ctx context.Context, via string, cert *x509.Certificate, cluster string) error {
	err := a.decide(ctx, cert, cluster)
	if a.audit != nil {
		code := http.StatusOK
		var refused *accessError
		switch {
		case errors.As(err, &refused) && refused.reason == FrontendRefusalHub:
			code = http.StatusServiceUnavailable
		case err != nil:
			code = http.StatusForbidden
		}
		entry := a.audit.Begin(audit.Request{Via: via, Cluster: cluster, User: certificateUser(cert), Method: http.MethodConnect,
			EscapedPath: cluster})
		entry.Complete(code, 0, time.Time{})
	}
	return err
}

// certificateUser is whom a frontend client's certificate stands for: a ProxyCertificate's hub identity, else the
// name and organizations the operator's CA signed into it.
func certificateUser(cert *x509.Certificate) *hubidentity.Identity {
	if ns, name, ok := contract.CertificateOf(cert); ok {
		user, groups := contract.CertificateIdentity(ns, name)
		return &hubidentity.Identity{User: user, Groups: groups}
	}
	return &hubidentity.Identity{User: cert.Subject.CommonName, Groups: cert.Subject.Organization}
}

// decide admits cert to cluster, or says why not with an *accessError.
func (a *frontendAccess) decide(ctx context.Context, cert *x509.Certificate, cluster string) error {
	if fleetWide(cert) || a.adopted[sha256.Sum256(cert.Raw)] {
		return nil
	}
	ns, name, ok := contract.CertificateOf(cert)
	if !ok {
		return a.refuse(FrontendRefusalNoIdentity, "the client certificate is neither the proxy-client nor a "+
			"ProxyCertificate's (it carries neither URI SAN the issuer writes); re-issue it as a ProxyCertificate")
	}
	if a.hub == nil {
		return a.refuse(FrontendRefusalHub, "this proxy-server cannot ask the hub's RBAC, so ProxyCertificate %s/%s reaches no cluster", ns, name)
	}
	user, groups := contract.CertificateIdentity(ns, name)
	d, err := a.hub.Authorize(ctx, hubidentity.Identity{User: user, Groups: groups}, cluster, "get")
	if err != nil {
		a.log.Error(err, "Cannot ask the hub's RBAC about a frontend client", "certificate", ns+"/"+name, "cluster", cluster)
		return a.refuse(FrontendRefusalHub, "cannot authorize ProxyCertificate %s/%s with the hub; try again later", ns, name)
	}
	if !d.Allowed {
		return a.refuse(FrontendRefusalDenied, "%s (ProxyCertificate %s/%s)", hubidentity.Denied(user, "get", cluster, d.Reason), ns, name)
	}
	return nil
}

func (a *frontendAccess) refuse(reason, format string, args ...any) error {
	frontendRefusals.WithLabelValues(reason).Inc()
	return &accessError{msg: fmt.Sprintf(format, args...), reason: reason}
}

// accessError is a dial the frontend's access refused; its text travels in the DIAL_RSP and comes back as the same
// error to an in-process tunnel (refusalOf).
type accessError struct {
	msg    string
	reason string // a FrontendRefusal reason; "" for one that came back in a DIAL_RSP
}

const accessErrorPrefix = "forbidden: "

func (e *accessError) Error() string { return accessErrorPrefix + e.msg }

// refusalOf is the accessError a DIAL_RSP's error text carries, nil for any other.
func refusalOf(text string) error {
	if msg, ok := strings.CutPrefix(text, accessErrorPrefix); ok {
		return &accessError{msg: msg}
	}
	return nil
}
