package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// KeyUsage is an extended key usage of a ProxyCertificate.
// +kubebuilder:validation:Enum="server auth";"client auth"
type KeyUsage string

const (
	// UsageServerAuth lets the certificate serve TLS.
	UsageServerAuth KeyUsage = "server auth"
	// UsageClientAuth lets the certificate authenticate a TLS client.
	UsageClientAuth KeyUsage = "client auth"
)

// IssuerReference points to the signer of a ProxyCertificate: the CA of a ManagedProxyConfiguration.
type IssuerReference struct {
	// name of the ManagedProxyConfiguration whose signer issues the certificate.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// kind of the issuer; only ManagedProxyConfiguration.
	// +optional
	// +kubebuilder:default=ManagedProxyConfiguration
	// +kubebuilder:validation:Enum=ManagedProxyConfiguration
	Kind string `json:"kind,omitempty"`
	// group of the issuer.
	// +optional
	// +kubebuilder:default=proxy.open-cluster-management.io
	// +kubebuilder:validation:Enum=proxy.open-cluster-management.io
	Group string `json:"group,omitempty"`
}

// CertificateSubject holds the optional subject fields.
type CertificateSubject struct {
	// organizations of the subject (O).
	// +optional
	Organizations []string `json:"organizations,omitempty"`
}

// ProxyCertificateSpec is a declarative certificate, shaped like cert-manager's Certificate.
// +kubebuilder:validation:XValidation:rule="!has(self.renewBefore) || !has(self.duration) || duration(self.renewBefore) < duration(self.duration)",message="renewBefore must be shorter than duration"
// +kubebuilder:validation:XValidation:rule="has(self.commonName) || (has(self.dnsNames) && size(self.dnsNames) > 0) || (has(self.ipAddresses) && size(self.ipAddresses) > 0)",message="at least one of commonName, dnsNames or ipAddresses is required"
type ProxyCertificateSpec struct {
	// secretName is the kubernetes.io/tls secret, in this namespace, that receives tls.crt, tls.key and ca.crt.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	SecretName string `json:"secretName"`
	// commonName of the subject.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	CommonName string `json:"commonName,omitempty"`
	// subject adds organizations to the subject.
	// +optional
	Subject *CertificateSubject `json:"subject,omitempty"`
	// dnsNames are the DNS subject alternative names.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=100
	// +kubebuilder:validation:items:MaxLength=253
	DNSNames []string `json:"dnsNames,omitempty"`
	// ipAddresses are the IP subject alternative names.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=100
	// +kubebuilder:validation:items:MaxLength=45
	// +kubebuilder:validation:items:XValidation:rule="isIP(self)",message="ipAddresses must be IP addresses"
	IPAddresses []string `json:"ipAddresses,omitempty"`
	// usages are the extended key usages; default client auth. A certificate that serves TLS must ask for server auth.
	// +optional
	// +listType=set
	// +kubebuilder:default={"client auth"}
	Usages []KeyUsage `json:"usages,omitempty"`
	// duration is the lifetime of the certificate.
	// +optional
	// +kubebuilder:default="4320h"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1h')",message="duration must be at least 1h"
	Duration *metav1.Duration `json:"duration,omitempty"`
	// renewBefore is how long before expiry the certificate is renewed; default when 2/3 of its lifetime passed.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="renewBefore must be positive"
	RenewBefore *metav1.Duration `json:"renewBefore,omitempty"`
	// issuerRef is the ManagedProxyConfiguration whose CA signs this certificate.
	IssuerRef IssuerReference `json:"issuerRef"`
}

// ProxyCertificateStatus is the observed state of a ProxyCertificate.
type ProxyCertificateStatus struct {
	// observedGeneration is the generation the conditions describe.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// notBefore of the issued certificate.
	// +optional
	NotBefore *metav1.Time `json:"notBefore,omitempty"`
	// notAfter of the issued certificate.
	// +optional
	NotAfter *metav1.Time `json:"notAfter,omitempty"`
	// renewalTime is when the certificate will be renewed.
	// +optional
	RenewalTime *metav1.Time `json:"renewalTime,omitempty"`
	// serialNumber of the issued certificate, hex.
	// +optional
	SerialNumber string `json:"serialNumber,omitempty"`
	// issuerFingerprint is the SHA-256 fingerprint of the CA that signed the certificate.
	// +optional
	IssuerFingerprint string `json:"issuerFingerprint,omitempty"`
	// conditions: Ready and Issuing.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=pcert
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Secret",type=string,JSONPath=`.spec.secretName`
// +kubebuilder:printcolumn:name="Issuer",type=string,JSONPath=`.spec.issuerRef.name`
// +kubebuilder:printcolumn:name="Not After",type=string,JSONPath=`.status.notAfter`
// +kubebuilder:printcolumn:name="Renewal",type=string,JSONPath=`.status.renewalTime`,priority=1
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// ProxyCertificate is a certificate issued by the CA of a ManagedProxyConfiguration into a kubernetes.io/tls secret,
// renewed before it expires, when its names change and when the CA rotates.
type ProxyCertificate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ProxyCertificateSpec   `json:"spec,omitempty"`
	Status ProxyCertificateStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// ProxyCertificateList is a list of ProxyCertificate.
type ProxyCertificateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ProxyCertificate `json:"items"`
}
