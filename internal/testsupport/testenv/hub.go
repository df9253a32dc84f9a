package testenv

import (
	"context"
	"fmt"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/repo"
)

// NewOCMHub is NewHub without the operator's own CRDs: a hub where OCM is installed and cluster-proxy is not yet,
// for tests that install the operator's CRDs themselves (the Helm chart, the kustomize output).
func NewOCMHub() (*envtest.Environment, error) {
	return newEnvironment(repo.OperatorOCMCRDFiles())
}

// StrictClient is a client of cfg for the built-in kinds and CustomResourceDefinitions (other kinds as
// unstructured) with strict field validation: a field the API server does not know is an error, not a warning.
func StrictClient(cfg *rest.Config) (client.Client, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	return client.WithFieldValidation(c, metav1.FieldValidationStrict), nil
}

// WaitEstablished waits until the CustomResourceDefinition name is Established, or ctx ends.
func WaitEstablished(ctx context.Context, c client.Client, name string) error {
	for {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := c.Get(ctx, client.ObjectKey{Name: name}, crd); err == nil {
			for _, cond := range crd.Status.Conditions {
				if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("CRD %s is not Established: %w", name, ctx.Err())
		case <-time.After(100 * time.Millisecond): // the API server offers no cheaper way to learn it than asking
		}
	}
}
