package addonapi

import (
	"context"
	"reflect"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	addonv1beta1 "open-cluster-management.io/api/addon/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// NewCacheFunc returns a manager's NewCache option for version v: the plain cache for V1alpha1; for V1beta1, a cache
// whose informers of the add-on kinds watch v1beta1 and hand the v1alpha1 objects to readers, event handlers and
// field indexes, and whose ByObject options given for a v1alpha1 kind apply to its v1beta1 informer.
func NewCacheFunc(v Version) cache.NewCacheFunc {
	return func(cfg *rest.Config, opts cache.Options) (cache.Cache, error) {
		if v != V1beta1 {
			return cache.New(cfg, opts)
		}
		byObject := make(map[client.Object]cache.ByObject, len(opts.ByObject))
		for obj, by := range opts.ByObject {
			if wire, ok := wireOf(obj); ok {
				obj = wire.(client.Object)
			}
			byObject[obj] = by
		}
		opts.ByObject = byObject
		c, err := cache.New(cfg, opts)
		if err != nil {
			return nil, err
		}
		return &wireCache{Cache: c}, nil
	}
}

type wireCache struct {
	cache.Cache
}

// Get and List read an add-on kind without the cache's deep copy: the conversion to v1alpha1 copies the object
// anyway, so a caller's object never shares memory with the cache.
func (c *wireCache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	return read(obj, func(o runtime.Object) error {
		if o != obj {
			opts = append(opts[:len(opts):len(opts)], client.UnsafeDisableDeepCopy)
		}
		return c.Cache.Get(ctx, key, o.(client.Object), opts...)
	})
}

func (c *wireCache) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return read(list, func(o runtime.Object) error {
		if o != list {
			opts = append(opts[:len(opts):len(opts)], client.UnsafeDisableDeepCopy)
		}
		return c.Cache.List(ctx, o.(client.ObjectList), opts...)
	})
}

func (c *wireCache) GetInformer(ctx context.Context, obj client.Object, opts ...cache.InformerGetOption) (cache.Informer, error) {
	wire, ok := wireOf(obj)
	if !ok {
		return c.Cache.GetInformer(ctx, obj, opts...)
	}
	informer, err := c.Cache.GetInformer(ctx, wire.(client.Object), opts...)
	if err != nil {
		return nil, err
	}
	return &modelInformer{Informer: informer}, nil
}

func (c *wireCache) GetInformerForKind(ctx context.Context, gvk schema.GroupVersionKind, opts ...cache.InformerGetOption) (cache.Informer, error) {
	if gvk.GroupVersion() != addonv1alpha1.SchemeGroupVersion || !wireKinds[gvk.Kind] {
		return c.Cache.GetInformerForKind(ctx, gvk, opts...)
	}
	informer, err := c.Cache.GetInformerForKind(ctx, addonv1beta1.SchemeGroupVersion.WithKind(gvk.Kind), opts...)
	if err != nil {
		return nil, err
	}
	return &modelInformer{Informer: informer}, nil
}

func (c *wireCache) RemoveInformer(ctx context.Context, obj client.Object) error {
	if wire, ok := wireOf(obj); ok {
		obj = wire.(client.Object)
	}
	return c.Cache.RemoveInformer(ctx, obj)
}

func (c *wireCache) IndexField(ctx context.Context, obj client.Object, field string, extract client.IndexerFunc) error {
	wire, ok := wireOf(obj)
	if !ok {
		return c.Cache.IndexField(ctx, obj, field, extract)
	}
	return c.Cache.IndexField(ctx, wire.(client.Object), field, func(o client.Object) []string {
		model, ok := toModel(o)
		if !ok {
			return nil
		}
		return extract(model.(client.Object))
	})
}

// toModel converts an object of a v1beta1 informer to v1alpha1; false if it is not an add-on object or does not
// convert (which the API's conversions never refuse for an object the server returned).
func toModel(obj any) (runtime.Object, bool) {
	wire, ok := obj.(runtime.Object)
	if !ok {
		return nil, false
	}
	model, ok := modelOf(wire)
	if !ok {
		return nil, false
	}
	if err := FromWire(wire, model); err != nil {
		return nil, false
	}
	return model, true
}

// modelInformer is a v1beta1 informer whose event handlers get v1alpha1 objects.
type modelInformer struct {
	cache.Informer
}

func (i *modelInformer) AddEventHandler(h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.Informer.AddEventHandler(modelHandler{h})
}

func (i *modelInformer) AddEventHandlerWithResyncPeriod(h toolscache.ResourceEventHandler, resync time.Duration) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.Informer.AddEventHandlerWithResyncPeriod(modelHandler{h}, resync)
}

func (i *modelInformer) AddEventHandlerWithOptions(h toolscache.ResourceEventHandler, opts toolscache.HandlerOptions) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.Informer.AddEventHandlerWithOptions(modelHandler{h}, opts)
}

type modelHandler struct {
	toolscache.ResourceEventHandler
}

func (h modelHandler) OnAdd(obj any, isInInitialList bool) {
	h.ResourceEventHandler.OnAdd(model(obj), isInInitialList)
}

func (h modelHandler) OnUpdate(oldObj, newObj any) {
	h.ResourceEventHandler.OnUpdate(model(oldObj), model(newObj))
}

func (h modelHandler) OnDelete(obj any) {
	if tombstone, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		tombstone.Obj = model(tombstone.Obj)
		h.ResourceEventHandler.OnDelete(tombstone)
		return
	}
	h.ResourceEventHandler.OnDelete(model(obj))
}

// model is obj as v1alpha1. An add-on object the conversions refuse (which a server does not return) reaches the
// handlers as a v1alpha1 object with its metadata only, so their type assertions hold and their requests still name
// it; any other object is passed as is.
func model(obj any) any {
	if m, ok := toModel(obj); ok {
		return m
	}
	wire, ok := obj.(runtime.Object)
	if !ok {
		return obj
	}
	m, ok := modelOf(wire)
	if !ok {
		return obj
	}
	meta := reflect.ValueOf(wire).Elem().FieldByName("ObjectMeta")
	reflect.ValueOf(m).Elem().FieldByName("ObjectMeta").Set(meta)
	return m
}
