package contract

import "strings"

// ImpersonatorCommonName is the common name of the certificate the hub side (the user-server and the aggregated API)
// presents to an agent's service-proxy inside the tunnel. The service-proxy takes Impersonate-* headers only from a
// client certificate of the signer's CA with this name: it is how a hub identity reaches a managed cluster without
// the hub credential that proved it.
const ImpersonatorCommonName = "open-cluster-management:cluster-proxy:impersonator"

// ReservedCommonName reports whether a certificate with common name cn carries rights beyond a proxy client's (the
// impersonator's, or an agent's for some cluster). Only the operator's own certificates may have such a name.
func ReservedCommonName(cn string) bool {
	return cn == ImpersonatorCommonName || strings.HasPrefix(cn, AgentCommonNamePrefix)
}
