package proxyenv

import (
	"encoding/json"
	"fmt"
	"net/url"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
)

// The customized variables of the service-proxy's OpenID Connect tokens, as the existing addon names them.
const (
	VariableOIDCIssuerURL            = "oidcIssuerURL"
	VariableOIDCClientID             = "oidcClientID"
	VariableOIDCUsernameClaim        = "oidcUsernameClaim"
	VariableOIDCUsernamePrefix       = "oidcUsernamePrefix"
	VariableOIDCGroupsClaim          = "oidcGroupsClaim"
	VariableOIDCGroupsPrefix         = "oidcGroupsPrefix"
	VariableOIDCReservedNamePrefixes = "oidcReservedNamePrefixes"
	VariableOIDCCAConfigMap          = "oidcCAConfigMap"
	VariableOIDCSigningAlgs          = "oidcSigningAlgs"
	VariableOIDCRequiredClaimsJSON   = "oidcRequiredClaimsJSON"
)

// OIDCVariables are a cluster's OpenID Connect settings for its service-proxy; nil in AgentVariables when
// oidcIssuerURL is not set.
type OIDCVariables struct {
	IssuerURL, ClientID, UsernameClaim, UsernamePrefix, GroupsClaim, GroupsPrefix string
	// ReservedNamePrefixes is the comma list as given; nil when unset (the agent's default, system:).
	ReservedNamePrefixes *string
	// CAConfigMap names the ConfigMap (key ca.crt) in the agent's namespace that holds the issuer's CA.
	CAConfigMap string
	SigningAlgs string
	// RequiredClaims are the claim=value pairs, sorted.
	RequiredClaims []string
}

// signingAlgs are the JOSE asymmetric algorithms a verifier accepts.
var signingAlgs = map[string]bool{"RS256": true, "RS384": true, "RS512": true, "ES256": true, "ES384": true,
	"ES512": true, "PS256": true, "PS384": true, "PS512": true, "EdDSA": true}

// set records one OIDC variable, checking its value; Variables checks that the set is whole.
func (o *OIDCVariables) set(name, value string, field string) error {
	bad := func(format string, args ...any) error {
		return fieldError(field, proxyv1alpha1.ReasonInvalidCustomizedVariable, name+" "+fmt.Sprintf(format, args...))
	}
	switch name {
	case VariableOIDCIssuerURL:
		u, err := url.Parse(value)
		if err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
			return bad("%q is not an https URL without user, query or fragment, e.g. https://issuer.example.com", value)
		}
		o.IssuerURL = value
	case VariableOIDCClientID:
		o.ClientID = value
	case VariableOIDCUsernameClaim:
		o.UsernameClaim = value
	case VariableOIDCUsernamePrefix:
		o.UsernamePrefix = value
	case VariableOIDCGroupsClaim:
		o.GroupsClaim = value
	case VariableOIDCGroupsPrefix:
		o.GroupsPrefix = value
	case VariableOIDCReservedNamePrefixes:
		if value != "" {
			for _, p := range strings.Split(value, ",") {
				if strings.TrimSpace(p) == "" {
					return bad("%q has an empty element; leave the whole value empty to turn the check off", value)
				}
			}
		}
		o.ReservedNamePrefixes = &value
	case VariableOIDCCAConfigMap:
		if errs := validation.IsDNS1123Subdomain(value); len(errs) > 0 {
			return bad("%q is not a ConfigMap name (%s)", value, strings.Join(errs, "; "))
		}
		o.CAConfigMap = value
	case VariableOIDCSigningAlgs:
		for _, alg := range strings.Split(value, ",") {
			if !signingAlgs[strings.TrimSpace(alg)] {
				return bad("%q names %q, which is not an asymmetric JOSE algorithm (RS256, ES256, PS256, EdDSA, ...)", value, alg)
			}
		}
		o.SigningAlgs = value
	case VariableOIDCRequiredClaimsJSON:
		var claims map[string]string
		if err := json.Unmarshal([]byte(value), &claims); err != nil {
			return bad("is not a JSON object of strings, e.g. {\"tenant\":\"t1\"}: %v", err)
		}
		o.RequiredClaims = o.RequiredClaims[:0]
		for k, v := range claims {
			if k == "" || strings.Contains(k, "=") {
				return bad("has the claim name %q; names are non-empty and without '='", k)
			}
			o.RequiredClaims = append(o.RequiredClaims, k+"="+v)
		}
		sort.Strings(o.RequiredClaims)
	}
	return nil
}

// isOIDCVariable reports whether name is one of the OIDC variables; other names, another add-on's included, are not
// this agent's business.
func isOIDCVariable(name string) bool {
	switch name {
	case VariableOIDCIssuerURL, VariableOIDCClientID, VariableOIDCUsernameClaim, VariableOIDCUsernamePrefix,
		VariableOIDCGroupsClaim, VariableOIDCGroupsPrefix, VariableOIDCReservedNamePrefixes, VariableOIDCCAConfigMap,
		VariableOIDCSigningAlgs, VariableOIDCRequiredClaimsJSON:
		return true
	}
	return false
}
