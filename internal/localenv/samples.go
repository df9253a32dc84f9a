package localenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testenv"
)

const (
	// fieldManager owns the fields localhub applies, so 'kubectl get --show-managed-fields' shows who set what.
	fieldManager = "localhub"
	// namespaceGrace is how long a namespaced sample waits for its namespace to be created by the operator (at
	// most the readiness timeout, which a user may have shortened).
	namespaceGrace = 30 * time.Second
)

// sample is one object of the samples, with where it came from for error messages.
type sample struct {
	obj        *unstructured.Unstructured
	source     string // file and document number
	namespaced bool   // known once the hub's discovery is available
}

func (s sample) String() string {
	if ns := s.obj.GetNamespace(); ns != "" {
		return fmt.Sprintf("%s %s/%s", s.obj.GetKind(), ns, s.obj.GetName())
	}
	return fmt.Sprintf("%s %s", s.obj.GetKind(), s.obj.GetName())
}

// loadSamples reads every object of the YAML files at path: a folder (its *.yaml and *.yml files, not
// recursively) or one file.
func loadSamples(path string) ([]sample, error) {
	files, err := sampleFiles(path)
	if err != nil {
		return nil, err
	}
	var samples []sample
	for _, f := range files {
		objs, err := decodeFile(f)
		if err != nil {
			return nil, err
		}
		samples = append(samples, objs...)
	}
	if !slices.ContainsFunc(samples, isManagedProxyConfiguration) {
		return nil, fmt.Errorf("no ManagedProxyConfiguration in %s: the hub would have nothing to become ready", path)
	}
	return samples, nil
}

// sampleFiles lists the YAML files at path, sorted so objects are applied in a predictable order.
func sampleFiles(path string) ([]string, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("samples: %w", err)
	}
	if !info.IsDir() {
		return []string{path}, nil
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, fmt.Errorf("read samples folder: %w", err)
	}
	var files []string
	for _, e := range entries {
		name := e.Name()
		// kustomization.yaml is kustomize's input listing the samples, not an object of the API.
		if e.IsDir() || name == "kustomization.yaml" || name == "kustomization.yml" {
			continue
		}
		if ext := filepath.Ext(name); ext == ".yaml" || ext == ".yml" {
			files = append(files, filepath.Join(path, name))
		}
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no *.yaml files in samples folder %s", path)
	}
	return files, nil // os.ReadDir sorts by name
}

// decodeFile returns every object of a multi-document YAML (or JSON) file, skipping empty documents.
func decodeFile(path string) ([]sample, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open sample: %w", err)
	}
	defer f.Close()
	objs, err := testenv.DecodeObjects(f)
	if err != nil {
		return nil, fmt.Errorf("decode %s: %w", path, err)
	}
	samples := make([]sample, 0, len(objs))
	for i, obj := range objs {
		source := fmt.Sprintf("%s object %d", path, i+1)
		if obj.GetAPIVersion() == "" || obj.GetKind() == "" || obj.GetName() == "" {
			return nil, fmt.Errorf("%s: apiVersion, kind and metadata.name are required", source)
		}
		samples = append(samples, sample{obj: obj, source: source})
	}
	return samples, nil
}

func isManagedProxyConfiguration(s sample) bool {
	return s.obj.GroupVersionKind().GroupKind() == proxyv1alpha1.GroupVersion.WithKind("ManagedProxyConfiguration").GroupKind()
}

// applySamples server-side applies every sample, cluster-scoped ones first: namespaced samples usually live in
// the namespace the operator creates for a ManagedProxyConfiguration.
func (s *session) applySamples(ctx context.Context, samples []sample) error {
	s.p.step("applying %d sample object(s) from %s", len(samples), s.opts.SamplesPath)
	ordered := slices.Clone(samples)
	for i := range ordered {
		namespaced, err := s.isNamespaced(ordered[i])
		if err != nil {
			return err
		}
		ordered[i].namespaced = namespaced
	}
	slices.SortStableFunc(ordered, func(a, b sample) int { return boolRank(a.namespaced) - boolRank(b.namespaced) })
	for _, smp := range ordered {
		if err := s.applySample(ctx, smp); err != nil {
			return err
		}
	}
	return nil
}

func (s *session) applySample(ctx context.Context, smp sample) error {
	if smp.namespaced {
		if smp.obj.GetNamespace() == "" {
			smp.obj.SetNamespace(metav1.NamespaceDefault) // as kubectl apply does
		}
		if err := s.ensureNamespace(ctx, smp.obj.GetNamespace()); err != nil {
			return fmt.Errorf("apply %s: %w", smp, err)
		}
	}
	if err := s.client.Apply(ctx, client.ApplyConfigurationFromUnstructured(smp.obj),
		client.FieldOwner(fieldManager), client.ForceOwnership); err != nil {
		return fmt.Errorf("apply %s (%s): %w", smp, smp.source, err)
	}
	s.p.detail("applied %s", smp)
	return nil
}

// isNamespaced asks the API server's discovery, which also catches a sample whose CRD is missing.
func (s *session) isNamespaced(smp sample) (bool, error) {
	gvk := smp.obj.GroupVersionKind()
	mapping, err := s.client.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return false, fmt.Errorf("%s: kind %s is not served by the hub: %w", smp.source, gvk, err)
	}
	return mapping.Scope.Name() == meta.RESTScopeNameNamespace, nil
}

// ensureNamespace waits for a namespace the operator is expected to create, so the namespace carries the
// operator's labels as on a real hub, and creates it only when nobody does (a sample in another namespace).
func (s *session) ensureNamespace(ctx context.Context, name string) error {
	exists := func(ctx context.Context) (bool, error) {
		err := s.client.Get(ctx, client.ObjectKey{Name: name}, &corev1.Namespace{})
		switch {
		case err == nil:
			return true, nil
		case apierrors.IsNotFound(err):
			return false, nil
		default:
			return false, fmt.Errorf("get namespace %s: %w", name, err)
		}
	}
	found, err := exists(ctx)
	if err != nil || found {
		return err
	}
	grace := min(namespaceGrace, s.opts.Timeout)
	s.p.detail("waiting up to %s for namespace %s", grace, name)
	err = s.poll(ctx, grace, exists)
	if !errors.Is(err, errPollTimeout) {
		return err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := s.client.Create(ctx, ns, client.FieldOwner(fieldManager)); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", name, err)
	}
	s.p.detail("created namespace %s (nobody else did)", name)
	return nil
}

func boolRank(b bool) int {
	if b {
		return 1
	}
	return 0
}
