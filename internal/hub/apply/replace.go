package apply

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// ErrNotCached is EnsureReplaced's answer for an object that exists but is not in the cache yet.
var ErrNotCached = errors.New("created earlier, not in the cache yet")

// EnsureReplaced is Ensure for the objects the operator writes once per managed cluster and alone (the agent
// ManifestWork, the ClusterProxyStatus): it creates them with a plain create and replaces what it renders with an
// update, never with server-side apply. On a large hub these writes dominate, and a plain write costs the API
// server far less than an apply (no YAML parsing of the patch, no field-set merge).
//
// It decides from the rendered hash and the managed fields alone, never from the content, so the cache may drop
// the content of these objects (see clusteragent.TrimCachedWork). The hash is that of the typed desired object, so a
// steady state never converts it to a map. It writes when the object is missing, when the hash differs, or when
// another writer changed what the operator renders; labels, annotations and owner references that others added are
// kept. desired gets the hash annotation.
//
// It returns the object as it now is (as read, or as the create or update answered) and whether it wrote. When
// the object exists but the cache has not seen it yet (created by an earlier pass), it returns ErrNotCached: the
// caller reads again soon. An object of desired's name that lacks desired's labels is another writer's (the existing
// add-on's agent ManifestWork, say), which a cache that selects those labels never holds: read through uncached, it is
// replaced like any other, and so enters the cache.
func EnsureReplaced[T client.Object](ctx context.Context, c client.Client, uncached client.Reader, desired T) (T, bool, error) {
	var none T
	gvk, err := apiutil.GVKForObject(desired, c.Scheme())
	if err != nil {
		return none, false, err
	}
	hash, err := typedHash(desired)
	if err != nil {
		return none, false, err
	}
	annotations := desired.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[HashAnnotation] = hash
	desired.SetAnnotations(annotations)
	key := client.ObjectKeyFromObject(desired)

	newT := func() (T, error) {
		obj, err := c.Scheme().New(gvk)
		if err != nil {
			return none, err
		}
		t, ok := obj.(T)
		if !ok {
			return none, fmt.Errorf("%s is a %T, not a %T", gvk.Kind, obj, none)
		}
		return t, nil
	}
	live, err := newT()
	if err != nil {
		return none, false, err
	}
	switch err := c.Get(ctx, key, live); {
	case apierrors.IsNotFound(err):
		err := c.Create(ctx, desired, client.FieldOwner(FieldOwner))
		if err == nil {
			return desired, true, nil // the create filled it in with the server's answer
		}
		if !apierrors.IsAlreadyExists(err) {
			return none, false, fmt.Errorf("create %s %s: %w", gvk.Kind, key, err)
		}
		if err := uncached.Get(ctx, key, live); err != nil {
			return none, false, fmt.Errorf("get %s %s: %w", gvk.Kind, key, err)
		}
		if hasLabels(live, desired.GetLabels()) {
			return none, false, ErrNotCached
		}
	case err != nil:
		return none, false, fmt.Errorf("get %s %s: %w", gvk.Kind, key, err)
	}
	if live.GetAnnotations()[HashAnnotation] == hash && !foreignSpecOwner(live) {
		return live, false, nil
	}

	// Only a replacement needs the maps.
	want, err := renderedMap(desired, gvk, nil)
	if err != nil {
		return none, false, err
	}
	have, err := toMap(live)
	if err != nil {
		return none, false, err
	}
	mergeMetadata(have, want)
	written, err := replaceRendered(ctx, c, have, want)
	if err != nil {
		return none, false, fmt.Errorf("replace %s %s: %w", gvk.Kind, key, err)
	}
	updated, err := newT()
	if err != nil {
		return none, true, err
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(written.Object, updated); err != nil {
		return none, true, fmt.Errorf("read the replaced %s %s: %w", gvk.Kind, key, err)
	}
	return updated, true, nil
}

// hasLabels reports whether obj carries every one of labels, with its value.
func hasLabels(obj client.Object, labels map[string]string) bool {
	for k, v := range labels {
		if got, ok := obj.GetLabels()[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// typedHash is the rendered hash of a typed object: its JSON without the hash annotation. The typed object marshals
// in a fixed field order, so the hash is stable; desired objects carry no status or creation time to leave out.
func typedHash(obj client.Object) (string, error) {
	delete(obj.GetAnnotations(), HashAnnotation)
	raw, err := json.Marshal(obj)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:])[:16], nil
}

// mergeMetadata sets the labels, annotations and owner references of want on have, keeping the others' ones.
func mergeMetadata(have, want map[string]any) {
	hm, _ := have["metadata"].(map[string]any)
	wm, _ := want["metadata"].(map[string]any)
	if hm == nil {
		hm = map[string]any{}
		have["metadata"] = hm
	}
	for _, field := range []string{"labels", "annotations"} {
		w, _ := wm[field].(map[string]any)
		if len(w) == 0 {
			continue
		}
		h, _ := hm[field].(map[string]any)
		if h == nil {
			h = map[string]any{}
			hm[field] = h
		}
		for k, v := range w {
			h[k] = v
		}
	}
	wantRefs, _ := wm["ownerReferences"].([]any)
	if len(wantRefs) == 0 {
		return
	}
	ours := map[any]bool{}
	for _, r := range wantRefs {
		if rm, ok := r.(map[string]any); ok {
			ours[rm["uid"]] = true
		}
	}
	refs := append([]any{}, wantRefs...)
	haveRefs, _ := hm["ownerReferences"].([]any)
	for _, r := range haveRefs {
		if rm, ok := r.(map[string]any); ok && !ours[rm["uid"]] {
			refs = append(refs, r)
		}
	}
	hm["ownerReferences"] = refs
}

// replaceRendered puts the rendered top-level fields (spec, data...) of want in place of live's with an update,
// removing what other writers added beside them: server-side apply would restore the fields the operator sets but
// keep the fields owned by others. It returns the object as the update answered.
func replaceRendered(ctx context.Context, c client.Client, live, want map[string]any) (*unstructured.Unstructured, error) {
	for k, v := range want {
		switch k {
		case "apiVersion", "kind", "metadata", "status":
		default:
			live[k] = v
		}
	}
	live["apiVersion"], live["kind"] = want["apiVersion"], want["kind"]
	if meta, ok := live["metadata"].(map[string]any); ok {
		// Sent managed fields would replace the stored ones, and a cached object holds only some of them.
		delete(meta, "managedFields")
	}
	u := &unstructured.Unstructured{Object: live}
	return u, c.Update(ctx, u, client.FieldOwner(FieldOwner))
}
