// Package certs holds the pure x509 logic behind the operator's mTLS
// certificates: creating and loading CAs, issuing leaf certificates,
// building CA bundles, deciding when a certificate must be (re)issued, and
// rotating a CA with a cross-signed intermediate so that TLS keeps working
// while the rollover is in progress.
//
// Nothing here talks to Kubernetes and nothing reads the wall clock: every
// time-dependent function takes `now` from its caller, so controllers can
// inject a clock and tests can use fixed times.
package certs
