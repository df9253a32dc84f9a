// Package csrreview decides what the operator does with the certificate
// signing requests that OCM's klusterlet creates on the hub for the
// cluster-proxy add-on agent of each managed cluster: the add-on's hub
// kubeconfig (signer kubernetes.io/kube-apiserver-client, approved here and
// signed by kube-controller-manager) and the proxy-agent's client
// certificate (signer open-cluster-management.io/proxy-agent-signer, approved
// and signed by the operator).
//
// The package is pure: it reads the CSR object and what the caller tells it
// about the cluster, and never talks to the API server.
package csrreview

import (
	"fmt"

	certificatesv1 "k8s.io/api/certificates/v1"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
)

const (
	// AddonName is the OCM add-on whose CSRs are reviewed.
	AddonName = "cluster-proxy"
	// ClusterNameLabel names the managed cluster a CSR was created for.
	ClusterNameLabel = "open-cluster-management.io/cluster-name"
	// AddonNameLabel names the add-on a CSR was created for.
	AddonNameLabel = "open-cluster-management.io/addon-name"
	// AgentSignerName is the signer of the proxy-agent's client certificate.
	AgentSignerName = "open-cluster-management.io/proxy-agent-signer"
)

// Decision is what to do with a CSR.
type Decision string

const (
	Ignore  Decision = "Ignore"  // not ours (other signer, other add-on, no labels): leave it alone, no event
	Approve Decision = "Approve" // approve; the caller signs when Sign is true
	Deny    Decision = "Deny"    // ours, but wrong: deny with Reason/Message
)

// Subject is a certificate subject as the operator advertises it. Its fields
// match contract.AgentSubject, so one converts to the other.
type Subject struct {
	CommonName          string
	Organizations       []string
	OrganizationalUnits []string
}

// Expected is what the operator advertised for the cluster's proxy-agent
// certificate.
type Expected struct {
	// Cluster is the cluster the caller looked up; it must equal the CSR's
	// ClusterNameLabel.
	Cluster string
	// Subject is the advertised proxy-agent subject; only used for
	// AgentSignerName. O and OU are compared as sets with multiplicity, so
	// their order does not matter.
	Subject Subject
}

// Result is the outcome of Review.
type Result struct {
	Decision Decision
	Sign     bool   // true only for the agent signer when approved
	Reason   string // CamelCase, one of the Reason constants; "" for Ignore
	Message  string // what is wrong, naming the field and the expected value; for Ignore, why (for debug logs)
}

// Review decides about one CSR. cluster is taken from the CSR's
// ClusterNameLabel; accepted says whether that cluster is accepted by the hub
// (ManagedCluster spec.hubAcceptsClient); expected is the advertised agent
// subject for that cluster (only used for the agent signer). CSRs that are
// already approved or denied, or not labelled for this add-on, or for another
// signer, are Ignore.
//
// The checks of a CSR that is ours run in this order, and the first failing
// one gives the Deny reason: ClusterLabelMismatch, ClusterNotAccepted,
// UnexpectedRequestor, UnexpectedUsages, InvalidRequest (PEM or parse),
// WeakKey, InvalidRequest (signature), UnexpectedSANs, UnexpectedSubject.
func Review(csr *certificatesv1.CertificateSigningRequest, accepted bool, expected Expected) Result {
	if csr == nil {
		return ignore("no CSR")
	}
	if cond, ok := decided(csr); ok {
		return ignore(fmt.Sprintf("already %s", cond))
	}
	signer := csr.Spec.SignerName
	if !handledSigner(signer) {
		return ignore(fmt.Sprintf("signer %q is not handled", signer))
	}
	cluster, ok := clusterOf(csr.Labels)
	if !ok {
		return ignore(fmt.Sprintf("not labelled %s=%s with a non-empty %s", AddonNameLabel, AddonName, ClusterNameLabel))
	}
	if d := reviewOurs(csr, cluster, accepted, expected); d != nil {
		return Result{Decision: Deny, Reason: d.reason, Message: d.message}
	}
	if signer == AgentSignerName {
		return Result{
			Decision: Approve,
			Sign:     true,
			Reason:   proxyv1alpha1.ReasonAgentCSRApproved,
			Message:  fmt.Sprintf("proxy-agent client certificate of cluster %q matches the advertised subject", cluster),
		}
	}
	return Result{
		Decision: Approve,
		Reason:   proxyv1alpha1.ReasonHubKubeconfigCSRApproved,
		Message:  fmt.Sprintf("%s hub kubeconfig of cluster %q requested by the cluster's own identity", AddonName, cluster),
	}
}

func ignore(why string) Result {
	return Result{Decision: Ignore, Message: why}
}

// reviewOurs runs the checks on a CSR of this add-on and returns the first
// failure, or nil when the CSR can be approved.
func reviewOurs(csr *certificatesv1.CertificateSigningRequest, cluster string, accepted bool, expected Expected) *denial {
	if d := checkClusterLabel(cluster, expected.Cluster); d != nil {
		return d
	}
	if d := checkAccepted(cluster, accepted); d != nil {
		return d
	}
	if d := checkRequestor(cluster, csr.Spec.Username, csr.Spec.Groups); d != nil {
		return d
	}
	if d := checkUsages(csr.Spec.Usages); d != nil {
		return d
	}
	req, d := parseRequest(csr.Spec.Request)
	if d != nil {
		return d
	}
	if d := checkKey(req.PublicKey); d != nil {
		return d
	}
	if d := checkSignature(req); d != nil {
		return d
	}
	if d := checkSANs(req); d != nil {
		return d
	}
	if csr.Spec.SignerName == AgentSignerName {
		return checkAgentSubject(expected.Subject, req.Subject)
	}
	return checkHubKubeconfigSubject(cluster, req.Subject)
}
