package serviceproxy

import (
	"bytes"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// defaultServiceCACheckInterval is how often, at most, the service CA file is read again. The kubelet refreshes a
// ConfigMap volume within about a minute of a change, so a few seconds more do not matter, and a request pays for a
// read only once per interval.
const defaultServiceCACheckInterval = 5 * time.Second

// serviceCATransport sends service requests through an http.Transport whose RootCAs are the system roots plus the
// certificates of a PEM file that may change while the agent runs (a ConfigMap volume). The file is read again at
// most once per interval, by the first request after it; a changed file gives a new http.Transport built from the
// new pool, so the standard verification applies to it and no connection verified under the old trust is used for a
// new request.
//
// What the file says:
//   - absent (the optional ConfigMap, or its key, does not exist): the system roots only;
//   - PEM certificates: the system roots and those certificates (blocks that are not certificates, or do not parse,
//     are skipped, as x509.CertPool.AppendCertsFromPEM does);
//   - no PEM certificate, or unreadable: logged as an error, and the trust in effect stays as it was. An edit that
//     broke the file does not drop the CAs services rely on, and the system roots are never dropped.
type serviceCATransport struct {
	file         string
	interval     time.Duration
	now          func() time.Time
	system       *x509.CertPool // never changed; cloned for each pool
	newTransport func(roots *x509.CertPool) *http.Transport

	current   atomic.Pointer[http.Transport]
	nextCheck atomic.Int64 // unix nanoseconds

	mu      sync.Mutex // held by the one check in progress
	checked bool       // whether absent and read hold a check's result
	absent  bool       // the file was absent at the last check
	read    []byte     // the file's content at the last check
}

// newServiceCATransport reads file once and logs what it found; an absent or invalid file is no error, the system
// roots are trusted until the file holds certificates. system is the pool of the system roots.
func newServiceCATransport(file string, interval time.Duration, system *x509.CertPool, newTransport func(*x509.CertPool) *http.Transport) *serviceCATransport {
	if interval <= 0 {
		interval = defaultServiceCACheckInterval
	}
	t := &serviceCATransport{file: file, interval: interval, now: time.Now, system: system, newTransport: newTransport}
	if err := t.check(); err != nil { // logged
		t.current.Store(newTransport(system.Clone()))
	}
	return t
}

func (t *serviceCATransport) RoundTrip(r *http.Request) (*http.Response, error) {
	t.checkIfDue()
	return t.current.Load().RoundTrip(r)
}

// checkIfDue reads the file when the interval since the last check has passed. Requests that come while another one
// checks go on with the trust in effect rather than wait.
func (t *serviceCATransport) checkIfDue() {
	if t.now().UnixNano() < t.nextCheck.Load() || !t.mu.TryLock() {
		return
	}
	defer t.mu.Unlock()
	if t.now().UnixNano() >= t.nextCheck.Load() { // not checked by the request that held the lock just before
		_ = t.checkLocked() // logged; on error the trust in effect stays
	}
}

// check reads the file now and logs the outcome, which it returns.
func (t *serviceCATransport) check() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.checkLocked()
}

func (t *serviceCATransport) checkLocked() error {
	t.nextCheck.Store(t.now().Add(t.interval).UnixNano())
	changed, err := t.reload()
	switch {
	case err != nil:
		logger.Error(err, "Ignoring the service CA file: https services are verified against the system roots and the CAs trusted before",
			"file", t.file)
	case changed && t.absent:
		logger.Info("No service CA file: https services are verified against the system roots only", "file", t.file)
	case changed:
		logger.Info("Trusting the service CA file for https services, in addition to the system roots", "file", t.file)
	}
	return err
}

// reload reads the file and, when its content changed, puts the trust it describes in effect. An error (no PEM
// certificate, a read failure) leaves the trust as it was and is reported once per content.
func (t *serviceCATransport) reload() (changed bool, err error) {
	data, err := os.ReadFile(t.file)
	absent := errors.Is(err, fs.ErrNotExist)
	if err != nil && !absent {
		// Not remembered as read: a transient failure is tried again, and reported again, at the next check.
		return false, fmt.Errorf("read the service CA file: %w", err)
	}
	if t.checked && t.absent == absent && bytes.Equal(t.read, data) {
		return false, nil
	}
	t.checked, t.absent, t.read = true, absent, data

	pool := t.system.Clone()
	if !absent && !pool.AppendCertsFromPEM(data) {
		return false, fmt.Errorf("service CA file %s holds no PEM certificate (%d bytes)", t.file, len(data))
	}
	if old := t.current.Swap(t.newTransport(pool)); old != nil {
		// Requests in flight finish on the old transport; its idle connections were verified under the old trust and
		// are closed now. Connections still in use go back to its pool and close after its idle timeout.
		old.CloseIdleConnections()
	}
	return true, nil
}

// systemRoots is the pool of the system roots, from load or else x509.SystemCertPool. Without one (an error, which
// Linux does not give) it is empty and logged: only the service CA file is trusted then.
func systemRoots(load func() (*x509.CertPool, error)) *x509.CertPool {
	if load == nil {
		load = x509.SystemCertPool
	}
	pool, err := load()
	if err != nil || pool == nil {
		logger.Error(err, "No system roots: https services are verified against the service CA file only")
		return x509.NewCertPool()
	}
	return pool
}
