package contract

import (
	"crypto/tls"
	"fmt"
	"strings"
)

// TLSProfile is the lowest TLS version and the TLS 1.2 cipher suites the product's TLS servers accept. The manager
// writes it as JSON (TLSProfileKey of a ConfigMap mounted at TLSProfileMount) for the proxy-servers, which apply it
// to every new handshake. The zero value is the default: TLS 1.2 and Go's secure cipher suites.
type TLSProfile struct {
	// MinTLSVersion is VersionTLS12 or VersionTLS13 (OCM's ocm-tls-profile names; TLSv1.2 and TLSv1.3 too).
	MinTLSVersion string `json:"minTLSVersion,omitempty"`
	// CipherSuites are IANA names of TLS 1.2 suites; TLS 1.3 suites are fixed by Go and may be listed, to no effect.
	CipherSuites []string `json:"cipherSuites,omitempty"`
}

const (
	// TLSProfileKey is the key of the profile in its ConfigMap.
	TLSProfileKey = "profile.json"
	// TLSProfileMount is where the proxy-server container finds that ConfigMap.
	TLSProfileMount = "/etc/cluster-proxy/tls-profile"
)

// TLSProfileError names the field of a TLSProfile that is wrong: "minTLSVersion" or "cipherSuites[i]".
type TLSProfileError struct{ Field, Message string }

func (e *TLSProfileError) Error() string { return e.Field + ": " + e.Message }

// Apply sets c's MinVersion and CipherSuites from the profile, or returns the first problem without touching c.
func (p TLSProfile) Apply(c *tls.Config) error {
	version, err := tlsVersion(p.MinTLSVersion)
	if err != nil {
		return err
	}
	suites, err := cipherSuites(p.CipherSuites)
	if err != nil {
		return err
	}
	c.MinVersion, c.CipherSuites = version, suites
	return nil
}

// Validate returns the first problem of the profile, nil when Apply would succeed.
func (p TLSProfile) Validate() error { return p.Apply(&tls.Config{}) }

func tlsVersion(name string) (uint16, error) {
	switch strings.TrimSpace(name) {
	case "", "VersionTLS12", "TLSv1.2":
		return tls.VersionTLS12, nil
	case "VersionTLS13", "TLSv1.3":
		return tls.VersionTLS13, nil
	case "VersionTLS10", "TLSv1.0", "VersionTLS11", "TLSv1.1":
		return 0, &TLSProfileError{"minTLSVersion", fmt.Sprintf("%q is below TLS 1.2, which every server of the product requires; use VersionTLS12 or VersionTLS13", name)}
	default:
		return 0, &TLSProfileError{"minTLSVersion", fmt.Sprintf("unknown TLS version %q; use VersionTLS12 or VersionTLS13", name)}
	}
}

func cipherSuites(names []string) ([]uint16, error) {
	if len(names) == 0 {
		return nil, nil // Go's defaults
	}
	secure := map[string]uint16{}
	for _, s := range tls.CipherSuites() {
		secure[s.Name] = s.ID
	}
	insecure := map[string]bool{}
	for _, s := range tls.InsecureCipherSuites() {
		insecure[s.Name] = true
	}
	var ids []uint16
	for i, raw := range names {
		name := strings.TrimSpace(raw)
		id, ok := secure[name]
		switch {
		case insecure[name]:
			return nil, &TLSProfileError{fmt.Sprintf("cipherSuites[%d]", i), fmt.Sprintf("%q is an insecure cipher suite", name)}
		case !ok:
			return nil, &TLSProfileError{fmt.Sprintf("cipherSuites[%d]", i), fmt.Sprintf("unknown cipher suite %q; use IANA names such as TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", name)}
		}
		ids = append(ids, id)
	}
	return ids, nil
}
