package proxyenv

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
)

// Customized variables the agent understands, as the existing addon names them. Other names are left alone: an
// AddOnDeploymentConfig may be shared with other add-ons.
const (
	// VariableServiceDomain is the cluster's service DNS suffix after <service>.<namespace>., for the service-proxy.
	VariableServiceDomain = "serviceDomain"
	// VariableEnableImpersonation turns the hub-token-to-impersonation path of the service-proxy on or off.
	VariableEnableImpersonation = "enableImpersonation"
)

// AgentVariables are the customized variables that change the agent's command line.
type AgentVariables struct {
	ServiceDomain string // "" keeps the agent's default
	// DisableImpersonation is true when enableImpersonation is "false".
	DisableImpersonation bool
	// OIDC are the service-proxy's OpenID Connect settings; nil without oidcIssuerURL.
	OIDC *OIDCVariables
}

// Variables reads the customized variables the agent understands; a bad value is a *FieldError naming the entry.
func Variables(vars []addonv1alpha1.CustomizedVariable) (AgentVariables, error) {
	var out AgentVariables
	var oidc OIDCVariables
	oidcFields := map[string]string{} // variable name -> the field of its entry
	for i, v := range vars {
		field := fmt.Sprintf("spec.customizedVariables[%d].value", i)
		if isOIDCVariable(v.Name) {
			if err := oidc.set(v.Name, v.Value, field); err != nil {
				return AgentVariables{}, err
			}
			oidcFields[v.Name] = field
			continue
		}
		switch v.Name {
		case VariableServiceDomain:
			domain := strings.TrimSuffix(v.Value, ".")
			if errs := validation.IsDNS1123Subdomain(domain); len(errs) > 0 {
				return AgentVariables{}, fieldError(field, proxyv1alpha1.ReasonInvalidCustomizedVariable,
					fmt.Sprintf("%s %q is not a DNS domain (%s): use a suffix such as svc.cluster.local", v.Name, v.Value, strings.Join(errs, "; ")))
			}
			out.ServiceDomain = domain
		case VariableEnableImpersonation:
			enabled, err := strconv.ParseBool(v.Value)
			if err != nil {
				return AgentVariables{}, fieldError(field, proxyv1alpha1.ReasonInvalidCustomizedVariable,
					fmt.Sprintf("%s %q is not a boolean: use true or false", v.Name, v.Value))
			}
			out.DisableImpersonation = !enabled
		}
	}
	switch {
	case oidc.IssuerURL != "" && oidc.ClientID == "":
		return AgentVariables{}, fieldError(oidcFields[VariableOIDCIssuerURL], proxyv1alpha1.ReasonInvalidCustomizedVariable,
			VariableOIDCIssuerURL+" needs "+VariableOIDCClientID+", the audience the tokens carry")
	case oidc.IssuerURL == "" && len(oidcFields) > 0:
		name := sortedKeys(oidcFields)[0]
		return AgentVariables{}, fieldError(oidcFields[name], proxyv1alpha1.ReasonInvalidCustomizedVariable,
			name+" needs "+VariableOIDCIssuerURL+" and "+VariableOIDCClientID)
	case oidc.IssuerURL != "":
		out.OIDC = &oidc
	}
	return out, nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
