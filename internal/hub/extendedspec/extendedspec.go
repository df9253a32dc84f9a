// Package extendedspec keeps the settings a ManagedProxyConfiguration has beyond the existing add-on's API from being
// lost without a word to a client built on that API's Go types. Such a client reads the object into types that lack
// those fields and writes it back with Update, so the API server receives a spec without them: every one of them is
// gone at once, while the object's metadata, which the client keeps, still carries the copy the operator recorded
// (Annotation). Every controller that reads a configuration calls Restore, which puts the recorded settings back in
// the copy it works with in that case, so the proxy-servers and agents keep their last good settings; the
// configuration's controller records the settings (Record) and reports a drop in a condition.
//
// A user may remove such settings on purpose too. An update counts as a drop only when every recorded setting is gone
// and either there were two or more, or the rest of the spec changed in the same update (what such a client came to
// change), or the spec is incomplete without them (a Provided signer without its secret): removing the last setting
// alone, as a user turning one feature off does, is a removal. A user who removes the last ones together with another
// change removes the annotation too, or the configuration keeps them.
package extendedspec

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"reflect"
	"slices"

	corev1 "k8s.io/api/core/v1"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
)

// Annotation holds the recorded settings, as JSON.
const Annotation = "proxy.open-cluster-management.io/extended-spec"

// Settings are the fields of a ManagedProxyConfiguration's spec that the existing add-on's API lacks, each zero when
// absent or at its default.
type Settings struct {
	HubUsers            *proxyv1alpha1.HubUsers                                 `json:"hubUsers,omitempty"`
	NetworkPolicies     *proxyv1alpha1.ManagedProxyConfigurationNetworkPolicies `json:"networkPolicies,omitempty"`
	TLSProfile          *proxyv1alpha1.ManagedProxyConfigurationTLSProfile      `json:"tlsProfile,omitempty"`
	ProvidedSigner      *proxyv1alpha1.AuthenticationProvided                   `json:"provided,omitempty"`
	HTTPConnectServer   int32                                                   `json:"httpConnectServer,omitempty"`
	AgentNodePlacements map[string]proxyv1alpha1.NodePlacement                  `json:"agentNodePlacements,omitempty"`
	AllowedServices     []proxyv1alpha1.AllowedService                          `json:"allowedServices,omitempty"`
	HubAuthorization    proxyv1alpha1.HubAuthorization                          `json:"hubAuthorization,omitempty"`
	ServerResources     *corev1.ResourceRequirements                            `json:"serverResources,omitempty"`
	AgentResources      *corev1.ResourceRequirements                            `json:"agentResources,omitempty"`
	// Audit and SessionRecording leave the records on: an update by an older client must not turn them off unseen.
	Audit            *proxyv1alpha1.ManagedProxyConfigurationAudit            `json:"audit,omitempty"`
	SessionRecording *proxyv1alpha1.ManagedProxyConfigurationSessionRecording `json:"sessionRecording,omitempty"`
}

// The defaults the API server fills in again when a client drops the field.
const (
	defaultHTTPConnectServer = 8094
	defaultHubAuthorization  = proxyv1alpha1.HubAuthorizationSubjectAccessReview
)

// Of reads the settings of mpc's spec.
func Of(mpc *proxyv1alpha1.ManagedProxyConfiguration) Settings {
	spec := &mpc.Spec
	s := Settings{HubUsers: spec.HubUsers, TLSProfile: spec.TLSProfile, ProvidedSigner: spec.Authentication.Signer.Provided,
		AgentNodePlacements: spec.ProxyAgent.AgentNodePlacements, ServerResources: spec.ProxyServer.Resources,
		AgentResources: spec.ProxyAgent.Resources, Audit: spec.Audit, SessionRecording: spec.SessionRecording}
	if np := spec.NetworkPolicies; np != nil && np.Enabled {
		s.NetworkPolicies = np
	}
	if d := spec.Deploy; d != nil && d.Ports.HTTPConnectServer != 0 && d.Ports.HTTPConnectServer != defaultHTTPConnectServer {
		s.HTTPConnectServer = d.Ports.HTTPConnectServer
	}
	if u := spec.UserServer; u != nil {
		s.AllowedServices = u.AllowedServices
		if u.HubAuthorization != defaultHubAuthorization {
			s.HubAuthorization = u.HubAuthorization
		}
	}
	if h := s.HubUsers; h != nil && *h == (proxyv1alpha1.HubUsers{}) {
		s.HubUsers = nil
	}
	if len(s.AgentNodePlacements) == 0 {
		s.AgentNodePlacements = nil
	}
	if len(s.AllowedServices) == 0 {
		s.AllowedServices = nil
	}
	return s
}

// Empty reports whether none of the settings is there.
func (s Settings) Empty() bool { return reflect.DeepEqual(s, Settings{}) }

// Fields are the paths of the settings there, as the spec names them.
func (s Settings) Fields() []string {
	var out []string
	add := func(present bool, path string) {
		if present {
			out = append(out, path)
		}
	}
	add(s.HubUsers != nil, "spec.hubUsers")
	add(s.NetworkPolicies != nil, "spec.networkPolicies")
	add(s.TLSProfile != nil, "spec.tlsProfile")
	add(s.ProvidedSigner != nil, "spec.authentication.signer.provided")
	add(s.HTTPConnectServer != 0, "spec.deploy.ports.httpConnectServer")
	add(s.AgentNodePlacements != nil, "spec.proxyAgent.agentNodePlacements")
	add(s.AllowedServices != nil, "spec.userServer.allowedServices")
	add(s.HubAuthorization != "", "spec.userServer.hubAuthorization")
	add(s.ServerResources != nil, "spec.proxyServer.resources")
	add(s.AgentResources != nil, "spec.proxyAgent.resources")
	add(s.Audit != nil, "spec.audit")
	add(s.SessionRecording != nil, "spec.sessionRecording")
	return out
}

// applyTo writes the settings into mpc's spec, each absent one as the API server leaves it when a client drops it
// (unset, or its default): Settings{}.applyTo clears them.
func (s Settings) applyTo(mpc *proxyv1alpha1.ManagedProxyConfiguration) {
	spec := &mpc.Spec
	spec.HubUsers, spec.TLSProfile, spec.NetworkPolicies = s.HubUsers, s.TLSProfile, s.NetworkPolicies
	spec.Authentication.Signer.Provided, spec.ProxyAgent.AgentNodePlacements = s.ProvidedSigner, s.AgentNodePlacements
	spec.ProxyServer.Resources, spec.ProxyAgent.Resources = s.ServerResources.DeepCopy(), s.AgentResources.DeepCopy()
	spec.Audit, spec.SessionRecording = s.Audit.DeepCopy(), s.SessionRecording.DeepCopy()
	if spec.Deploy == nil && s.HTTPConnectServer != 0 {
		spec.Deploy = &proxyv1alpha1.ManagedProxyConfigurationDeploy{}
	}
	if spec.Deploy != nil {
		spec.Deploy.Ports.HTTPConnectServer = cmp.Or(s.HTTPConnectServer, defaultHTTPConnectServer)
	}
	if spec.UserServer == nil && (s.AllowedServices != nil || s.HubAuthorization != "") {
		spec.UserServer = &proxyv1alpha1.ManagedProxyConfigurationUserServer{}
	}
	if spec.UserServer != nil {
		spec.UserServer.AllowedServices = slices.Clone(s.AllowedServices)
		spec.UserServer.HubAuthorization = cmp.Or(s.HubAuthorization, defaultHubAuthorization)
	}
}

// record is what the annotation holds: the settings, and a digest of the rest of the spec they were recorded with.
type record struct {
	Settings Settings `json:"settings"`
	Rest     string   `json:"rest"`
}

func recorded(mpc *proxyv1alpha1.ManagedProxyConfiguration) (r record, ok bool) {
	raw, found := mpc.Annotations[Annotation]
	if !found || json.Unmarshal([]byte(raw), &r) != nil {
		return record{}, false
	}
	return r, true
}

// rest is a digest of mpc's spec without the settings: the part the existing add-on's types hold.
func rest(mpc *proxyv1alpha1.ManagedProxyConfiguration) string {
	c := mpc.DeepCopy()
	Settings{}.applyTo(c)
	raw, _ := json.Marshal(c.Spec)
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:8])
}

// Restore puts the recorded settings back into mpc, the copy the caller works with, when an update dropped them (see
// the package's comment): it returns the paths restored, nil when nothing was dropped.
func Restore(mpc *proxyv1alpha1.ManagedProxyConfiguration) []string {
	if !Of(mpc).Empty() {
		return nil
	}
	r, ok := recorded(mpc)
	if !ok || r.Settings.Empty() {
		return nil
	}
	fields := r.Settings.Fields()
	signer := mpc.Spec.Authentication.Signer
	incomplete := signer.Type == proxyv1alpha1.Provided && signer.Provided == nil
	if len(fields) < 2 && r.Rest == rest(mpc) && !incomplete {
		return nil // the last setting removed, nothing else changed: a removal
	}
	r.Settings.applyTo(mpc)
	return fields
}

// Record is the annotation value for mpc's settings, "" when it should carry none; call it on a configuration Restore
// found nothing dropped from.
func Record(mpc *proxyv1alpha1.ManagedProxyConfiguration) string {
	s := Of(mpc)
	if s.Empty() {
		return ""
	}
	raw, err := json.Marshal(record{Settings: s, Rest: rest(mpc)})
	if err != nil {
		return "" // only on a programming error: every field marshals
	}
	return string(raw)
}
