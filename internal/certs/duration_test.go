package certs

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// TestProxyCertificateDefaultDurationIsTheLeafDuration: the CRD's default spec.duration (a marker, which cannot name
// a Go constant) says the same lifetime as DefaultLeafDuration, which the manager and the agents' CSRs use.
func TestProxyCertificateDefaultDurationIsTheLeafDuration(t *testing.T) {
	g := NewWithT(t)
	raw, err := os.ReadFile(filepath.Join("..", "..", "config", "crd", "bases", "proxy.open-cluster-management.io_proxycertificates.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	crd := &apiextensionsv1.CustomResourceDefinition{}
	g.Expect(yaml.Unmarshal(raw, crd)).To(Succeed())
	g.Expect(crd.Spec.Versions).NotTo(BeEmpty())
	def := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["duration"].Default
	g.Expect(def).NotTo(BeNil(), "spec.duration has a default")
	var text string
	g.Expect(yaml.Unmarshal(def.Raw, &text)).To(Succeed())
	d, err := time.ParseDuration(text)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(d).To(Equal(DefaultLeafDuration))
}
