// Package metawrite is a client whose creates, updates and status updates ask the API server to answer with the
// written object's metadata only (the server's as=PartialObjectMetadata transform), not with the whole object.
//
// A manager that writes a ManifestWork, a status and an owner for every cluster decodes each answer it gets: on a
// large hub that was an eighth of its CPU, for objects it already holds (it sent them). The metadata is what a
// write changes of the object for its writer (resourceVersion, uid, generation, managedFields, what admission
// added); the rest stays as sent. Objects the server changes beyond their metadata (defaults of the schema, a
// mutating webhook) are seen through the cache, as any other change, and not in the answer.
package metawrite

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// accept asks for the metadata, and takes the whole object from a server that does not transform answers.
const accept = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"

// NewClient returns c whose Create, Update and Status().Update of typed objects are answered with metadata only;
// rc is a REST client of the same server (rest.UnversionedRESTClientFor). Unstructured objects, dry runs and every
// other call go to c.
func NewClient(c client.Client, rc rest.Interface) client.Client {
	return &metaClient{Client: c, rest: rc}
}

type metaClient struct {
	client.Client
	rest rest.Interface
}

func (c *metaClient) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	o := (&client.CreateOptions{}).ApplyOptions(opts)
	if !c.handles(obj) || len(o.DryRun) > 0 {
		return c.Client.Create(ctx, obj, opts...)
	}
	return c.write(ctx, http.MethodPost, obj, "", o.FieldManager)
}

func (c *metaClient) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	o := (&client.UpdateOptions{}).ApplyOptions(opts)
	if !c.handles(obj) || len(o.DryRun) > 0 {
		return c.Client.Update(ctx, obj, opts...)
	}
	return c.write(ctx, http.MethodPut, obj, "", o.FieldManager)
}

func (c *metaClient) Status() client.SubResourceWriter {
	return &statusWriter{SubResourceWriter: c.Client.Status(), c: c}
}

type statusWriter struct {
	client.SubResourceWriter
	c *metaClient
}

func (w *statusWriter) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	o := (&client.SubResourceUpdateOptions{}).ApplyOptions(opts)
	if !w.c.handles(obj) || len(o.DryRun) > 0 || o.SubResourceBody != nil {
		return w.SubResourceWriter.Update(ctx, obj, opts...)
	}
	return w.c.write(ctx, http.MethodPut, obj, "status", o.FieldManager)
}

// handles is true for a typed object with an ObjectMeta of its own, where the answer's metadata is put.
func (c *metaClient) handles(obj client.Object) bool {
	if _, ok := obj.(runtime.Unstructured); ok {
		return false
	}
	v := reflect.ValueOf(obj)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return false
	}
	m := v.Elem().FieldByName("ObjectMeta")
	return m.IsValid() && m.Type() == reflect.TypeFor[metav1.ObjectMeta]()
}

// write sends obj with method (POST creates; PUT updates obj, or its subresource) and puts the answer's metadata in
// obj.
func (c *metaClient) write(ctx context.Context, method string, obj client.Object, subresource, fieldManager string) error {
	gvk, err := apiutil.GVKForObject(obj, c.Scheme())
	if err != nil {
		return err
	}
	mapping, err := c.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return err
	}
	obj.GetObjectKind().SetGroupVersionKind(gvk)
	body, err := json.Marshal(obj)
	if err != nil {
		return fmt.Errorf("encode %s %s: %w", gvk.Kind, client.ObjectKeyFromObject(obj), err)
	}
	req := c.rest.Verb(method).AbsPath(path(mapping, obj.GetNamespace(), method, obj.GetName(), subresource)...).
		SetHeader("Content-Type", "application/json").SetHeader("Accept", accept).Body(body)
	if fieldManager != "" {
		req = req.Param("fieldManager", fieldManager)
	}
	result := req.Do(ctx)
	if err := result.Error(); err != nil {
		return err // the API's Status, as a typed client returns it
	}
	answer, _ := result.Raw()
	return takeAnswer(answer, obj)
}

// path is the request path of a write: the collection for a POST, the object (or its subresource) for a PUT.
func path(mapping *meta.RESTMapping, namespace, method, name, subresource string) []string {
	gv := mapping.GroupVersionKind.GroupVersion()
	segments := []string{"/apis", gv.Group, gv.Version}
	if gv.Group == "" {
		segments = []string{"/api", gv.Version}
	}
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		segments = append(segments, "namespaces", namespace)
	}
	segments = append(segments, mapping.Resource.Resource)
	if method != http.MethodPost {
		segments = append(segments, name)
		if subresource != "" {
			segments = append(segments, subresource)
		}
	}
	return segments
}

// takeAnswer puts the answer's metadata in obj, or the whole answer when the server sent the whole object.
func takeAnswer(answer []byte, obj client.Object) error {
	var partial metav1.PartialObjectMetadata
	if err := json.Unmarshal(answer, &partial); err != nil {
		return fmt.Errorf("decode the answer to a write of %s: %w", client.ObjectKeyFromObject(obj), err)
	}
	if partial.GroupVersionKind() != metav1.SchemeGroupVersion.WithKind("PartialObjectMetadata") {
		// The whole object: decoded into a fresh one, as a client that asked for it would.
		fresh := reflect.New(reflect.TypeOf(obj).Elem()).Interface().(client.Object)
		if err := json.Unmarshal(answer, fresh); err != nil {
			return fmt.Errorf("decode the answer to a write of %s: %w", client.ObjectKeyFromObject(obj), err)
		}
		reflect.ValueOf(obj).Elem().Set(reflect.ValueOf(fresh).Elem())
		return nil
	}
	reflect.ValueOf(obj).Elem().FieldByName("ObjectMeta").Set(reflect.ValueOf(partial.ObjectMeta))
	return nil
}

// RESTClient is the REST client NewClient writes with: cfg's server and credentials, JSON, and the same HTTP client
// as the manager's (its connections, rate limits aside).
func RESTClient(cfg *rest.Config, httpClient *http.Client, codecs runtime.NegotiatedSerializer) (rest.Interface, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.GroupVersion = &schema.GroupVersion{}
	cfg.APIPath = "/"
	cfg.ContentType = runtime.ContentTypeJSON
	cfg.NegotiatedSerializer = codecs
	if httpClient == nil {
		return rest.UnversionedRESTClientFor(cfg)
	}
	return rest.UnversionedRESTClientForConfigAndClient(cfg, httpClient)
}
