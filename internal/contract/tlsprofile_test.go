package contract

import (
	"crypto/tls"
	"errors"
	"testing"
)

func TestTLSProfile(t *testing.T) {
	for _, tc := range []struct {
		name    string
		profile TLSProfile
		min     uint16
		suites  []uint16
		field   string
	}{
		{name: "default", min: tls.VersionTLS12},
		{name: "OCM's 1.3", profile: TLSProfile{MinTLSVersion: "VersionTLS13"}, min: tls.VersionTLS13},
		{name: "openssl-style 1.2", profile: TLSProfile{MinTLSVersion: "TLSv1.2"}, min: tls.VersionTLS12},
		{name: "suites", profile: TLSProfile{CipherSuites: []string{"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", " TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"}},
			min: tls.VersionTLS12, suites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384}},
		{name: "a TLS 1.3 suite may be listed", profile: TLSProfile{MinTLSVersion: "VersionTLS13", CipherSuites: []string{"TLS_AES_128_GCM_SHA256"}},
			min: tls.VersionTLS13, suites: []uint16{tls.TLS_AES_128_GCM_SHA256}},
		{name: "below 1.2", profile: TLSProfile{MinTLSVersion: "VersionTLS11"}, field: "minTLSVersion"},
		{name: "unknown version", profile: TLSProfile{MinTLSVersion: "VersionTLS14"}, field: "minTLSVersion"},
		{name: "unknown suite", profile: TLSProfile{CipherSuites: []string{"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", "TLS_NOPE"}}, field: "cipherSuites[1]"},
		{name: "insecure suite", profile: TLSProfile{CipherSuites: []string{"TLS_RSA_WITH_RC4_128_SHA"}}, field: "cipherSuites[0]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &tls.Config{MinVersion: 1, CipherSuites: []uint16{1}}
			err := tc.profile.Apply(c)
			if tc.field != "" {
				var pe *TLSProfileError
				if !errors.As(err, &pe) || pe.Field != tc.field {
					t.Fatalf("error %v; want one for %s", err, tc.field)
				}
				if c.MinVersion != 1 || len(c.CipherSuites) != 1 {
					t.Fatal("a bad profile changed the config")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.MinVersion != tc.min || len(c.CipherSuites) != len(tc.suites) {
				t.Fatalf("min %x suites %v; want %x %v", c.MinVersion, c.CipherSuites, tc.min, tc.suites)
			}
			for i := range tc.suites {
				if c.CipherSuites[i] != tc.suites[i] {
					t.Fatalf("suites %v; want %v", c.CipherSuites, tc.suites)
				}
			}
		})
	}
}
