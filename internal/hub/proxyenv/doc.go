// Package proxyenv turns the parts of an OCM AddOnDeploymentConfig that shape the proxy-agent
// Deployment (proxyConfig, registries, resourceRequirements) into validated values: container
// environment for an HTTP/HTTPS forward proxy, the CA bundle the agent trusts, the mirrored image
// and the container resources.
//
// Every validation failure is a *FieldError naming the AddOnDeploymentConfig field (for example
// "spec.proxyConfig.httpsProxy") with a CamelCase Reason, so a caller can show it in a condition
// and keep the last good Deployment. Messages never contain the user:password part of a proxy
// URL, nor the contents of a PEM block.
//
// The package is pure: no I/O, no clients, deterministic output for the same input.
package proxyenv
