package tlsreload

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract"
)

// Profile is the TLS profile (contract.TLSProfile as JSON) of a file the manager writes, re-read like the
// certificates: a change applies to the next handshakes of every server config that uses it, while established
// connections stay up. A missing file is the default profile.
type Profile struct {
	file string
	cur  atomic.Pointer[appliedProfile]
}

type appliedProfile struct {
	raw          []byte
	minVersion   uint16
	cipherSuites []uint16
}

// NewProfile reads the profile in file ("" for the default); a malformed one is an error.
func NewProfile(file string) (*Profile, error) {
	p := &Profile{file: file}
	p.cur.Store(&appliedProfile{minVersion: tls.VersionTLS12})
	if _, err := p.Reload(); err != nil {
		return nil, err
	}
	return p, nil
}

// Reload reads the file and applies it when it changed; a malformed profile leaves the previous one in use.
func (p *Profile) Reload() (changed bool, err error) {
	if p.file == "" {
		return false, nil
	}
	raw, err := os.ReadFile(p.file)
	if errors.Is(err, fs.ErrNotExist) {
		raw, err = nil, nil
	}
	if err != nil {
		return false, fmt.Errorf("tlsreload: %w", err)
	}
	if bytes.Equal(raw, p.cur.Load().raw) {
		return false, nil
	}
	var profile contract.TLSProfile
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &profile); err != nil {
			return false, fmt.Errorf("tlsreload: TLS profile %s: %w", p.file, err)
		}
	}
	var c tls.Config
	if err := profile.Apply(&c); err != nil {
		return false, fmt.Errorf("tlsreload: TLS profile %s: %w", p.file, err)
	}
	p.cur.Store(&appliedProfile{raw: raw, minVersion: c.MinVersion, cipherSuites: c.CipherSuites})
	return true, nil
}

// Run reloads every interval until ctx ends.
func (p *Profile) Run(ctx context.Context, interval time.Duration, log logr.Logger) {
	poll(ctx, interval, p.Reload, func() {
		cur := p.cur.Load()
		log.Info("Applied the TLS profile", "file", p.file, "minVersion", tls.VersionName(cur.minVersion), "cipherSuites", len(cur.cipherSuites))
	}, func(err error) { log.Error(err, "Keeping the previous TLS profile") })
}

// Current is the profile in force: the lowest TLS version and the TLS 1.2 cipher suites (nil for Go's defaults).
func (p *Profile) Current() (minVersion uint16, cipherSuites []uint16) {
	cur := p.cur.Load()
	return cur.minVersion, cur.cipherSuites
}

// apply sets the current profile on a handshake's config.
func (p *Profile) apply(c *tls.Config) {
	cur := p.cur.Load()
	c.MinVersion, c.CipherSuites = cur.minVersion, cur.cipherSuites
}
