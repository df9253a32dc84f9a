// Package apply writes desired objects only when the live object differs, so a steady state makes no API writes.
// Ensure server-side applies the fields the operator renders and leaves the ones other writers add (hub objects a
// user or Helm may share); EnsureReplaced (replace.go) creates or updates the whole object (per-cluster objects only
// the operator writes); UpdateStatus writes a status that changed.
package apply

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

const (
	// FieldOwner is the server-side apply field manager of every object the operator writes.
	FieldOwner = "cluster-proxy-operator"
	// HashAnnotation records the hash of the rendered object, so a changed desired state is applied even when the
	// change only removes something (which a subset comparison cannot see).
	HashAnnotation = "proxy.open-cluster-management.io/rendered-hash"
)

// Ensure makes the fields desired sets hold desired's values, and leaves every other field alone: what other
// writers add beside them (a user's defaultConfig in a ClusterManagementAddOn, Helm's labels, the restartedAt
// annotation of 'kubectl rollout restart', an injected env var) stays, and a field of desired that someone changed
// is put back. It reads the live object through c (the cache, in a manager) and applies desired with server-side
// apply, forcing ownership of its fields, only when a field desired sets differs, a list differs in length, or the
// rendered hash changed. Where another writer's list element took the key of one desired renders, so that both
// cannot stand, the rendered fields replace the live ones. It returns whether it wrote.
func Ensure(ctx context.Context, c client.Client, desired client.Object, opts ...Option) (bool, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	gvk, want, err := rendered(c, desired, o.notRendered)
	if err != nil {
		return false, err
	}

	live, err := c.Scheme().New(gvk)
	if err != nil {
		return false, err
	}
	liveObj := live.(client.Object)
	switch err := c.Get(ctx, client.ObjectKeyFromObject(desired), liveObj); {
	case apierrors.IsNotFound(err):
	case err != nil:
		return false, fmt.Errorf("get %s %s: %w", gvk.Kind, client.ObjectKeyFromObject(desired), err)
	default:
		have, err := toMap(liveObj)
		if err != nil {
			return false, err
		}
		if Contains(have, want) {
			return false, nil
		}
		err = apply(ctx, c, want)
		if !apierrors.IsInvalid(err) {
			return err == nil, err
		}
		// Another writer's list element holds a key of one the operator renders (a Service port renumbered but
		// still named): both cannot stand, so the rendered fields replace the live ones.
		if _, err := replaceRendered(ctx, c, have, want); err != nil {
			return false, fmt.Errorf("restore %s %s: %w", gvk.Kind, client.ObjectKeyFromObject(desired), err)
		}
		return true, nil
	}
	return true, apply(ctx, c, want)
}

// apply writes want with server-side apply, taking over the fields it sets from other writers.
func apply(ctx context.Context, c client.Client, want map[string]any) error {
	u := &unstructured.Unstructured{Object: want}
	if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("apply %s %s/%s: %w", u.GetKind(), u.GetNamespace(), u.GetName(), err)
	}
	return nil
}

// rendered is desired as the map the operator writes: no status or creation time, its type set, the paths it does
// not render removed, and the hash of the rest in HashAnnotation.
func rendered(c client.Client, desired client.Object, notRendered [][]string) (schema.GroupVersionKind, map[string]any, error) {
	gvk, err := apiutil.GVKForObject(desired, c.Scheme())
	if err != nil {
		return gvk, nil, err
	}
	want, err := renderedMap(desired, gvk, notRendered)
	if err != nil {
		return gvk, nil, err
	}
	setHash(want)
	return gvk, want, nil
}

// renderedMap is desired as the map the operator writes, without the hash.
func renderedMap(desired client.Object, gvk schema.GroupVersionKind, notRendered [][]string) (map[string]any, error) {
	want, err := toMap(desired)
	if err != nil {
		return nil, err
	}
	delete(want, "status")
	meta, _ := want["metadata"].(map[string]any)
	delete(meta, "creationTimestamp")
	want["apiVersion"], want["kind"] = gvk.GroupVersion().String(), gvk.Kind
	for _, path := range notRendered {
		unstructured.RemoveNestedField(want, path...)
	}
	return want, nil
}

// foreignSpecOwner reports whether another writer owns fields outside metadata and status, i.e. changed what
// the operator renders (kubectl edit of a ManifestWork, say). Status writers and metadata-only writers (labels,
// annotations, finalizers) are left alone. EnsureReplaced decides from it, for the objects the operator writes alone.
func foreignSpecOwner(obj client.Object) bool {
	for _, mf := range obj.GetManagedFields() {
		if mf.Manager == FieldOwner || mf.Subresource != "" || mf.FieldsV1 == nil {
			continue
		}
		fields := map[string]any{}
		if json.Unmarshal(mf.FieldsV1.GetRawBytes(), &fields) != nil {
			continue
		}
		delete(fields, "f:metadata")
		delete(fields, "f:status")
		delete(fields, ".")
		if len(fields) > 0 {
			return true
		}
	}
	return false
}

// KeepForeignManagedFields is a cache transform that keeps only the managed-fields entries EnsureReplaced looks at
// (other writers of the main resource), so cached objects do not carry the operator's own, large entries.
func KeepForeignManagedFields(obj any) (any, error) {
	o, ok := obj.(client.Object)
	if !ok {
		return obj, nil
	}
	entries := o.GetManagedFields()
	kept := entries[:0]
	for _, mf := range entries {
		if mf.Manager != FieldOwner && mf.Subresource == "" {
			kept = append(kept, mf)
		}
	}
	if len(kept) == 0 {
		kept = nil
	}
	o.SetManagedFields(kept)
	return o, nil
}

// Option adjusts Ensure.
type Option func(*options)

type options struct{ notRendered [][]string }

// NotRendered leaves the field at path (for example "spec", "installStrategy") out of what Ensure applies, so
// another writer's value (a user's, Helm's) is neither compared nor touched, even where desired's Go type would
// render a zero value.
func NotRendered(path ...string) Option {
	return func(o *options) { o.notRendered = append(o.notRendered, path) }
}

// Contains reports whether every field set in want has the same value in have. Maps may hold extra keys in
// have (server defaults, other owners' labels); lists must have the same length. A zero value in want matches
// a missing key in have.
func Contains(have, want any) bool {
	switch w := want.(type) {
	case map[string]any:
		h, ok := have.(map[string]any)
		if !ok {
			return isZero(w) && have == nil
		}
		for k, wv := range w {
			hv, found := h[k]
			if !found {
				if isZero(wv) {
					continue
				}
				return false
			}
			if !Contains(hv, wv) {
				return false
			}
		}
		return true
	case []any:
		h, ok := have.([]any)
		if !ok {
			return len(w) == 0 && have == nil
		}
		if len(h) != len(w) {
			return false
		}
		for i := range w {
			if !Contains(h[i], w[i]) {
				return false
			}
		}
		return true
	default:
		if have == nil {
			return isZero(want)
		}
		return have == want
	}
}

func isZero(v any) bool {
	switch t := v.(type) {
	case nil:
		return true
	case map[string]any:
		return len(t) == 0
	case []any:
		return len(t) == 0
	case string:
		return t == ""
	case bool:
		return !t
	case float64:
		return t == 0
	}
	return false
}

func toMap(obj any) (map[string]any, error) {
	raw, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	m := map[string]any{}
	return m, json.Unmarshal(raw, &m)
}

func setHash(obj map[string]any) {
	raw, _ := json.Marshal(obj) // maps marshal with sorted keys, so the hash is stable
	sum := sha256.Sum256(raw)
	meta, _ := obj["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
		obj["metadata"] = meta
	}
	ann, _ := meta["annotations"].(map[string]any)
	if ann == nil {
		ann = map[string]any{}
		meta["annotations"] = ann
	}
	ann[HashAnnotation] = hex.EncodeToString(sum[:])[:16]
}

// UpdateStatus writes the status of after when it differs from before (a copy taken before the status was changed):
// a PUT of the status subresource, locked by the resourceVersion after carries, so a concurrent change is never
// overwritten. The API server decodes it once, where a merge patch costs it an encoding of the stored object, the
// merge and a decoding of the result; at 1,000 clusters that is a tenth of its work. Managed fields are the stored
// ones either way: the API server ignores those a status request carries.
func UpdateStatus(ctx context.Context, c client.Client, before, after client.Object) error {
	if equality.Semantic.DeepEqual(before, after) {
		return nil
	}
	return c.Status().Update(ctx, after, client.FieldOwner(FieldOwner))
}
