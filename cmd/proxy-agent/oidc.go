package main

import (
	"flag"
	"fmt"
	"strings"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/agent/serviceproxy"
)

// oidcFlags are the service-proxy's OpenID Connect flags, named as a kube-apiserver's.
type oidcFlags struct {
	issuerURL, clientID, usernameClaim, usernamePrefix, groupsClaim, groupsPrefix, caFile string
	signingAlgs                                                                           string
	reservedPrefixes                                                                      *string // nil: the default
	requiredClaims                                                                        []string
}

func (o *oidcFlags) bind(fs *flag.FlagSet) {
	fs.StringVar(&o.issuerURL, "oidc-issuer-url", "", "accept ID tokens of this OpenID Connect issuer (https) and impersonate "+
		"the user they map to; empty turns OIDC off")
	fs.StringVar(&o.clientID, "oidc-client-id", "", "the audience ID tokens must carry; required with --oidc-issuer-url")
	fs.StringVar(&o.usernameClaim, "oidc-username-claim", "sub", "the claim of the user name")
	fs.StringVar(&o.usernamePrefix, "oidc-username-prefix", "", "prefix of the user name; default the issuer URL and '#' "+
		"(none for the email claim); '-' for none")
	fs.StringVar(&o.groupsClaim, "oidc-groups-claim", "", "the claim of the groups (a string or a list)")
	fs.StringVar(&o.groupsPrefix, "oidc-groups-prefix", "", "prefix of every group")
	fs.Func("oidc-reserved-name-prefixes", "comma-separated prefixes refused for mapped users and groups (default system:); "+
		"empty turns the check off", func(v string) error { o.reservedPrefixes = &v; return nil })
	fs.StringVar(&o.caFile, "oidc-ca-file", "", "PEM CA bundle the issuer is verified with (default the system roots); re-read when it changes")
	fs.StringVar(&o.signingAlgs, "oidc-signing-algs", "RS256", "comma-separated accepted signing algorithms")
	fs.Func("oidc-required-claim", "claim=value a token must carry; repeatable", appendTo(&o.requiredClaims))
}

// options are the service-proxy's OIDC options, nil when OIDC is off.
func (o *oidcFlags) options() (*serviceproxy.OIDC, error) {
	if o.issuerURL == "" {
		if o.clientID != "" {
			return nil, fmt.Errorf("--oidc-client-id needs --oidc-issuer-url")
		}
		return nil, nil
	}
	out := &serviceproxy.OIDC{
		IssuerURL: o.issuerURL, ClientID: o.clientID, UsernameClaim: o.usernameClaim, UsernamePrefix: o.usernamePrefix,
		GroupsClaim: o.groupsClaim, GroupsPrefix: o.groupsPrefix, CAFile: o.caFile, SigningAlgs: splitList(o.signingAlgs),
	}
	if o.reservedPrefixes != nil {
		out.ReservedPrefixes = []string{}
		if *o.reservedPrefixes != "" {
			out.ReservedPrefixes = strings.Split(*o.reservedPrefixes, ",")
		}
	}
	for _, kv := range o.requiredClaims {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--oidc-required-claim %q: want claim=value", kv)
		}
		if out.RequiredClaims == nil {
			out.RequiredClaims = map[string]string{}
		}
		out.RequiredClaims[k] = v
	}
	return out, nil
}

func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}
