package main

import (
	"flag"
	"io"
	"reflect"
	"testing"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/agent/serviceproxy"
)

func TestOIDCFlags(t *testing.T) {
	parse := func(args ...string) (*serviceproxy.OIDC, error) {
		var o oidcFlags
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		o.bind(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return o.options()
	}
	if got, err := parse(); got != nil || err != nil {
		t.Fatalf("no flags: %+v, %v; want OIDC off", got, err)
	}
	got, err := parse("--oidc-issuer-url=https://issuer.example", "--oidc-client-id=c", "--oidc-username-prefix=oidc:",
		"--oidc-groups-claim=groups", "--oidc-signing-algs=RS256, ES256", "--oidc-required-claim=tenant=t1",
		"--oidc-required-claim=hd=example.com", "--oidc-reserved-name-prefixes=system:,dev:", "--oidc-ca-file=/etc/oidc-ca/ca.crt")
	if err != nil {
		t.Fatal(err)
	}
	want := &serviceproxy.OIDC{IssuerURL: "https://issuer.example", ClientID: "c", UsernameClaim: "sub", UsernamePrefix: "oidc:",
		GroupsClaim: "groups", SigningAlgs: []string{"RS256", "ES256"}, CAFile: "/etc/oidc-ca/ca.crt",
		ReservedPrefixes: []string{"system:", "dev:"}, RequiredClaims: map[string]string{"tenant": "t1", "hd": "example.com"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	got, _ = parse("--oidc-issuer-url=https://issuer.example", "--oidc-client-id=c", "--oidc-reserved-name-prefixes=")
	if got.ReservedPrefixes == nil || len(got.ReservedPrefixes) != 0 {
		t.Fatalf("an empty --oidc-reserved-name-prefixes is %v; want an empty list (check off)", got.ReservedPrefixes)
	}
	got, _ = parse("--oidc-issuer-url=https://issuer.example", "--oidc-client-id=c")
	if got.ReservedPrefixes != nil {
		t.Fatalf("no --oidc-reserved-name-prefixes is %v; want nil (the default)", got.ReservedPrefixes)
	}
	for _, bad := range [][]string{
		{"--oidc-client-id=c"},
		{"--oidc-issuer-url=https://issuer.example", "--oidc-client-id=c", "--oidc-required-claim=novalue"},
	} {
		if _, err := parse(bad...); err == nil {
			t.Fatalf("%v: no error", bad)
		}
	}
}
