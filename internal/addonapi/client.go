package addonapi

import (
	"context"
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// NewClient returns c speaking the add-on API at version v: as is for V1alpha1; for V1beta1, a client whose reads and
// writes of the v1alpha1 add-on kinds go to the hub as v1beta1. A Patch of those kinds is refused (a patch computed on
// one version's fields cannot be sent to the other's); the operator writes them with Create and Update.
func NewClient(c client.Client, v Version) client.Client {
	if v != V1beta1 {
		return c
	}
	return &wireClient{Client: c}
}

// NewReader is NewClient for a reader alone, such as the manager's uncached API reader.
func NewReader(r client.Reader, v Version) client.Reader {
	if v != V1beta1 {
		return r
	}
	return wireReader{r}
}

type wireReader struct {
	client.Reader
}

func (r wireReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	return read(obj, func(o runtime.Object) error { return r.Reader.Get(ctx, key, o.(client.Object), opts...) })
}

func (r wireReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return read(list, func(o runtime.Object) error { return r.Reader.List(ctx, o.(client.ObjectList), opts...) })
}

type wireClient struct {
	client.Client
}

func (c *wireClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	return wireReader{c.Client}.Get(ctx, key, obj, opts...)
}

func (c *wireClient) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return wireReader{c.Client}.List(ctx, list, opts...)
}

func (c *wireClient) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	return write(obj, func(o client.Object) error { return c.Client.Create(ctx, o, opts...) })
}

func (c *wireClient) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	return write(obj, func(o client.Object) error { return c.Client.Update(ctx, o, opts...) })
}

func (c *wireClient) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	return write(obj, func(o client.Object) error { return c.Client.Delete(ctx, o, opts...) })
}

func (c *wireClient) DeleteAllOf(ctx context.Context, obj client.Object, opts ...client.DeleteAllOfOption) error {
	return write(obj, func(o client.Object) error { return c.Client.DeleteAllOf(ctx, o, opts...) })
}

func (c *wireClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	if err := refusePatch(obj); err != nil {
		return err
	}
	return c.Client.Patch(ctx, obj, patch, opts...)
}

// Apply sends a server-side apply of an add-on kind as v1beta1: the fields it sets, converted as a whole object is.
func (c *wireClient) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
	wire, ok, err := applyToWire(obj)
	if err != nil {
		return err
	}
	if !ok {
		return c.Client.Apply(ctx, obj, opts...)
	}
	return c.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(wire), opts...)
}

func (c *wireClient) Status() client.SubResourceWriter {
	return &wireStatusWriter{SubResourceWriter: c.Client.Status()}
}

type wireStatusWriter struct {
	client.SubResourceWriter
}

func (w *wireStatusWriter) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	return write(obj, func(o client.Object) error { return w.SubResourceWriter.Update(ctx, o, opts...) })
}

func (w *wireStatusWriter) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	if err := refusePatch(obj); err != nil {
		return err
	}
	return w.SubResourceWriter.Patch(ctx, obj, patch, opts...)
}

// read reads into obj through do: as is for any kind but the add-on API's, else into a v1beta1 object converted
// into obj (an unstructured obj too).
func read(obj runtime.Object, do func(runtime.Object) error) error {
	if u, model, err := typedModel(obj); model != nil || err != nil {
		if err != nil {
			return err
		}
		return viaModel(u, model, read(model, do))
	}
	wire, ok := wireOf(obj)
	if !ok {
		return do(obj)
	}
	if err := do(wire); err != nil {
		return err
	}
	return FromWire(wire, obj)
}

// write sends obj through do, as v1beta1 for the add-on API's kinds (an unstructured obj too), and takes back what
// the server returned.
func write(obj client.Object, do func(client.Object) error) error {
	if u, model, err := typedModel(obj); model != nil || err != nil {
		if err != nil {
			return err
		}
		return viaModel(u, model, write(model, do))
	}
	wire, ok := wireOf(obj)
	if !ok {
		return do(obj)
	}
	if err := ToWire(obj, wire); err != nil {
		return err
	}
	if err := do(wire.(client.Object)); err != nil {
		return err
	}
	return FromWire(wire, obj)
}

// typedModel returns, for an unstructured object of a v1alpha1 add-on kind, the typed object holding the same: that
// travels as v1beta1 as the operator's typed objects do. It returns a nil model for any other object.
func typedModel(obj runtime.Object) (*unstructured.Unstructured, client.Object, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, nil, nil
	}
	gvk := u.GroupVersionKind()
	if gvk.GroupVersion() != addonv1alpha1.SchemeGroupVersion || !wireKinds[gvk.Kind] {
		return nil, nil, nil
	}
	model, err := conversions.New(gvk)
	if err != nil {
		return nil, nil, err
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, model); err != nil {
		return nil, nil, fmt.Errorf("read the %s: %w", gvk.Kind, err)
	}
	return u, model.(client.Object), nil
}

// viaModel puts model, read or written through err, back into u as v1alpha1.
func viaModel(u *unstructured.Unstructured, model client.Object, err error) error {
	if err != nil {
		return err
	}
	gvk := u.GroupVersionKind()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(model)
	if err != nil {
		return err
	}
	u.Object = m
	u.SetGroupVersionKind(gvk)
	return nil
}

// applyToWire converts an apply configuration of a v1alpha1 add-on kind to v1beta1; false for any other kind. The
// converted object keeps only fields that are set: an apply owns every field it sends, and the conversion through
// the whole type adds every field the type does not omit when empty.
func applyToWire(obj runtime.ApplyConfiguration) (*unstructured.Unstructured, bool, error) {
	data, err := json.Marshal(obj)
	if err != nil {
		return nil, false, fmt.Errorf("read an apply configuration: %w", err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(data); err != nil {
		return nil, false, nil //nolint:nilerr // not an object of a kind: not the add-on API's
	}
	_, model, err := typedModel(u)
	if model == nil || err != nil {
		return nil, false, err
	}
	wire, _ := wireOf(model)
	if err := ToWire(model, wire); err != nil {
		return nil, false, err
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(wire)
	if err != nil {
		return nil, false, err
	}
	delete(m, "status")
	pruned, _ := pruneEmpty(m).(map[string]any)
	return &unstructured.Unstructured{Object: pruned}, true, nil
}

// pruneEmpty drops, at every depth, the values that are empty (nil, "", 0, false, {} or []) once their own empty
// members are dropped.
func pruneEmpty(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, e := range v {
			if e = pruneEmpty(e); e != nil {
				out[k] = e
			}
		}
		if len(out) == 0 {
			return nil
		}
		return out
	case []any:
		out := make([]any, 0, len(v))
		for _, e := range v {
			if e = pruneEmpty(e); e != nil {
				out = append(out, e)
			}
		}
		if len(out) == 0 {
			return nil
		}
		return out
	case string:
		if v == "" {
			return nil
		}
	case bool:
		if !v {
			return nil
		}
	case int64:
		if v == 0 {
			return nil
		}
	case float64:
		if v == 0 {
			return nil
		}
	case nil:
		return nil
	}
	return v
}

func refusePatch(obj client.Object) error {
	if _, ok := wireOf(obj); ok {
		return fmt.Errorf("patch of %T is not supported where the hub serves the add-on API as v1beta1: use Update", obj)
	}
	return nil
}
