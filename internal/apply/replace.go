package apply

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// EnsureReplaced is Ensure for the objects the operator writes once per managed cluster and alone (the agent
// ManifestWork, the ClusterProxyStatus): it creates them with a plain create and replaces what it renders with an
// update, never with server-side apply. On a large hub these writes dominate, and a plain write costs the API
// server far less than an apply (no YAML parsing of the patch, no field-set merge).
//
// It decides from the rendered hash and the managed fields alone, never from the content, so the cache may drop
// the content of these objects (see clusteragent.TrimCachedWork). It writes when the object is missing, when the hash
// differs, or when another writer changed what the operator renders; labels, annotations and owner references that
// others added are kept. It returns whether it wrote.
func EnsureReplaced(ctx context.Context, c client.Client, desired client.Object) (bool, error) {
	gvk, want, err := rendered(c, desired, nil)
	if err != nil {
		return false, err
	}
	key := client.ObjectKeyFromObject(desired)

	liveTyped, err := c.Scheme().New(gvk)
	if err != nil {
		return false, err
	}
	switch err := c.Get(ctx, key, liveTyped.(client.Object)); {
	case apierrors.IsNotFound(err):
		// The typed object, not the map: decoding the answer into it is cheaper.
		annotations := desired.GetAnnotations()
		if annotations == nil {
			annotations = map[string]string{}
		}
		annotations[HashAnnotation] = hashOf(want)
		desired.SetAnnotations(annotations)
		if err := c.Create(ctx, desired, client.FieldOwner(FieldOwner)); err != nil {
			if apierrors.IsAlreadyExists(err) {
				return false, nil // created by an earlier pass the cache has not seen yet; its event re-queues the owner
			}
			return false, fmt.Errorf("create %s %s: %w", gvk.Kind, key, err)
		}
		return true, nil
	case err != nil:
		return false, fmt.Errorf("get %s %s: %w", gvk.Kind, key, err)
	}
	liveObj := liveTyped.(client.Object)
	if liveObj.GetAnnotations()[HashAnnotation] == hashOf(want) && !foreignSpecOwner(liveObj) {
		return false, nil
	}
	have, err := toMap(liveObj)
	if err != nil {
		return false, err
	}
	mergeMetadata(have, want)
	if err := replaceRendered(ctx, c, have, want, nil); err != nil {
		return false, fmt.Errorf("replace %s %s: %w", gvk.Kind, key, err)
	}
	return true, nil
}

func hashOf(obj map[string]any) string {
	meta, _ := obj["metadata"].(map[string]any)
	ann, _ := meta["annotations"].(map[string]any)
	h, _ := ann[HashAnnotation].(string)
	return h
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
