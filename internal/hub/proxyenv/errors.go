package proxyenv

// FieldError says which AddOnDeploymentConfig field (or, for ClusterRegistriesField, which part of the
// ManagedCluster's image-registries annotation) is wrong and why; Reason is a CamelCase condition reason.
type FieldError struct {
	// Field is the path of the offending field, e.g. "spec.proxyConfig.httpsProxy" or
	// "spec.registries[1].mirror".
	Field string
	// Reason is a condition reason of api/v1alpha1 (ReasonInvalidProxyURL, ...).
	Reason string
	// Message says what is wrong and what to do. It never contains proxy credentials (they are
	// masked as "***") nor PEM block contents.
	Message string
}

// Error returns "<Field>: <Message>".
func (e *FieldError) Error() string {
	return e.Field + ": " + e.Message
}

func fieldError(field, reason, message string) *FieldError {
	return &FieldError{Field: field, Reason: reason, Message: message}
}
