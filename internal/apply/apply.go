// Package apply writes desired objects with server-side apply, but only when the live object differs, so a
// steady state makes no API writes.
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

// Ensure makes the live object match desired. It reads the live object through c (the cache, in a manager) and
// applies desired only when a field desired sets differs, a list differs in length, or the rendered hash changed.
// It returns whether it wrote.
func Ensure(ctx context.Context, c client.Client, desired client.Object, opts ...Option) (bool, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	gvk, want, err := rendered(c, desired, o.userOwned)
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
		foreign := foreignSpecOwner(liveObj, o.userOwned...)
		if Contains(have, want) && !foreign {
			return false, nil
		}
		if foreign {
			if _, err := replaceRendered(ctx, c, have, want, o.userOwned); err != nil {
				return false, fmt.Errorf("restore %s %s: %w", gvk.Kind, client.ObjectKeyFromObject(desired), err)
			}
		}
	}
	u := &unstructured.Unstructured{Object: want}
	if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return false, fmt.Errorf("apply %s %s: %w", gvk.Kind, client.ObjectKeyFromObject(desired), err)
	}
	return true, nil
}

// rendered is desired as the map the operator writes: no status or creation time, its type set, the user-owned
// paths removed, and the hash of the rest in HashAnnotation.
func rendered(c client.Client, desired client.Object, userOwned [][]string) (schema.GroupVersionKind, map[string]any, error) {
	gvk, err := apiutil.GVKForObject(desired, c.Scheme())
	if err != nil {
		return gvk, nil, err
	}
	want, err := renderedMap(desired, gvk, userOwned)
	if err != nil {
		return gvk, nil, err
	}
	setHash(want)
	return gvk, want, nil
}

// renderedMap is desired as the map the operator writes, without the hash.
func renderedMap(desired client.Object, gvk schema.GroupVersionKind, userOwned [][]string) (map[string]any, error) {
	want, err := toMap(desired)
	if err != nil {
		return nil, err
	}
	delete(want, "status")
	meta, _ := want["metadata"].(map[string]any)
	delete(meta, "creationTimestamp")
	want["apiVersion"], want["kind"] = gvk.GroupVersion().String(), gvk.Kind
	for _, path := range userOwned {
		unstructured.RemoveNestedField(want, path...)
	}
	return want, nil
}

// foreignSpecOwner reports whether another writer owns fields outside metadata and status, i.e. changed what
// the operator renders (kubectl edit of a Deployment, say). Status writers and metadata-only writers (labels,
// annotations, finalizers) are left alone.
func foreignSpecOwner(obj client.Object, userOwned ...[]string) bool {
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
		if ownsOutside(fields, userOwned) {
			return true
		}
	}
	return false
}

// ownsOutside reports whether a managed-fields set holds a field outside the user-owned paths.
func ownsOutside(fields map[string]any, userOwned [][]string) bool {
	for k, v := range fields {
		if k == "." {
			continue
		}
		var deeper [][]string
		matched := false
		for _, p := range userOwned {
			if len(p) > 0 && "f:"+p[0] == k {
				if len(p) == 1 {
					matched = true
				} else {
					deeper = append(deeper, p[1:])
				}
			}
		}
		if matched {
			continue
		}
		sub, _ := v.(map[string]any)
		if len(deeper) == 0 || len(sub) == 0 || ownsOutside(sub, deeper) {
			return true
		}
	}
	return false
}

// KeepForeignManagedFields is a cache transform that keeps only the managed-fields entries Ensure looks at (other
// writers of the main resource), so cached objects do not carry the operator's own, large entries.
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

type options struct{ userOwned [][]string }

// UserOwned leaves the field at path (for example "spec", "installStrategy") to users: it is not rendered, a
// user's value is no tampering, and a restore keeps it.
func UserOwned(path ...string) Option {
	return func(o *options) { o.userOwned = append(o.userOwned, path) }
}

// replaceRendered removes what other writers added next to the rendered fields: server-side apply restores the
// fields the operator sets but keeps fields owned by others (an injected env var, an extra Service port). The
// rendered top-level fields (spec, data, rules...) replace the live ones with an update; a Service keeps the values
// the server allocated (cluster IPs, node ports), which a replacement must not discard. It returns the object as the
// update answered.
func replaceRendered(ctx context.Context, c client.Client, live, want map[string]any, userOwned [][]string) (*unstructured.Unstructured, error) {
	kept := map[int]any{}
	for i, path := range userOwned {
		if v, found, _ := unstructured.NestedFieldCopy(live, path...); found {
			kept[i] = v
		}
	}
	for k, v := range want {
		switch k {
		case "apiVersion", "kind", "metadata", "status":
		default:
			if k == "spec" && want["kind"] == "Service" {
				v = keepAllocated(live["spec"], v)
			}
			live[k] = v
		}
	}
	live["apiVersion"], live["kind"] = want["apiVersion"], want["kind"]
	if meta, ok := live["metadata"].(map[string]any); ok {
		// Sent managed fields would replace the stored ones, and a cached object holds only some of them.
		delete(meta, "managedFields")
	}
	for i, v := range kept {
		_ = unstructured.SetNestedField(live, v, userOwned[i]...)
	}
	u := &unstructured.Unstructured{Object: live}
	return u, c.Update(ctx, u, client.FieldOwner(FieldOwner))
}

// keepAllocated copies the server-allocated fields of a Service spec into a rendered one.
func keepAllocated(liveSpec, wantSpec any) any {
	have, _ := liveSpec.(map[string]any)
	want, _ := wantSpec.(map[string]any)
	out := map[string]any{}
	for k, v := range want {
		out[k] = v
	}
	for _, k := range []string{"clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy", "healthCheckNodePort"} {
		if v, ok := have[k]; ok {
			out[k] = v
		}
	}
	nodePorts := map[any]any{}
	livePorts, _ := have["ports"].([]any)
	for _, p := range livePorts {
		if pm, ok := p.(map[string]any); ok && pm["nodePort"] != nil {
			nodePorts[pm["name"]] = pm["nodePort"]
		}
	}
	wantPorts, _ := want["ports"].([]any)
	ports := make([]any, 0, len(wantPorts))
	for _, p := range wantPorts {
		pm, _ := p.(map[string]any)
		cp := map[string]any{}
		for k, v := range pm {
			cp[k] = v
		}
		if np, ok := nodePorts[pm["name"]]; ok {
			cp["nodePort"] = np
		}
		ports = append(ports, cp)
	}
	out["ports"] = ports
	return out
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

// PatchStatus writes the status of after when it differs from before (a copy taken before the status was
// changed), with an optimistic lock so a concurrent change is never overwritten. It is for kinds other projects
// define: a merge patch carries only the fields that changed, so a status field newer than the operator's Go type
// survives.
func PatchStatus(ctx context.Context, c client.Client, before, after client.Object) error {
	if equality.Semantic.DeepEqual(before, after) {
		return nil
	}
	return c.Status().Patch(ctx, after, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}), client.FieldOwner(FieldOwner))
}

// UpdateStatus writes the status of after when it differs from before, like PatchStatus, for the operator's own
// kinds, whose every status field its Go types know: a PUT of the status subresource, locked by the resourceVersion
// after carries. The API server decodes it once, where a merge patch costs it an encoding of the stored object, the
// merge and a decoding of the result; at 1,000 clusters that is a tenth of its work. Managed fields are the stored
// ones either way: the API server ignores those a status request carries.
func UpdateStatus(ctx context.Context, c client.Client, before, after client.Object) error {
	if equality.Semantic.DeepEqual(before, after) {
		return nil
	}
	return c.Status().Update(ctx, after, client.FieldOwner(FieldOwner))
}
