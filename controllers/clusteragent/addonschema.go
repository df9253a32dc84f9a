package clusteragent

import (
	"encoding/json"
	"reflect"
	"strings"
	"sync/atomic"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
)

// AddOnCRDName is the CustomResourceDefinition of ManagedClusterAddOn, which OCM installs on the hub.
const AddOnCRDName = "managedclusteraddons.addon.open-cluster-management.io"

// addOnSchema says whether the add-on status may be written whole. A PUT of the status subresource costs the API
// server a single decoding, a merge patch also an encoding of the stored add-on, the merge and a decoding of the
// result; at a thousand clusters that is a tenth of the API server's work for the add-on. But the add-on is OCM's
// kind: a hub whose OCM is newer than the operator's Go types may store status fields the types do not know, and a
// PUT of a typed add-on would drop them. So the status is written whole only while every field the installed CRD
// allows in status is a field of addonv1alpha1.ManagedClusterAddOnStatus, and by a merge patch, which carries only
// what changed, until the CRD has been read and whenever it allows more.
type addOnSchema struct{ fits atomic.Bool }

// observe re-checks the installed CRD; a deleted one, or any other object, means merge patches.
func (s *addOnSchema) observe(obj any, deleted bool) {
	crd, ok := obj.(*apiextensionsv1.CustomResourceDefinition)
	s.fits.Store(ok && !deleted && crd.Name == AddOnCRDName && statusFitsTypes(crd))
}

// statusFitsTypes reports whether every value the CRD's v1alpha1 status schema allows can be held by the Go type.
func statusFitsTypes(crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, v := range crd.Spec.Versions {
		if v.Name != addonv1alpha1.GroupVersion.Version || v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
			continue
		}
		status, ok := v.Schema.OpenAPIV3Schema.Properties["status"]
		return ok && schemaFits(&status, reflect.TypeFor[addonv1alpha1.ManagedClusterAddOnStatus]())
	}
	return false
}

var jsonMarshaler = reflect.TypeFor[json.Marshaler]()

// schemaFits reports whether a Go value of type t keeps every field schema allows: each property of an object is a
// field of the struct (by JSON name), recursively through lists and maps, and no level keeps unknown fields.
func schemaFits(schema *apiextensionsv1.JSONSchemaProps, t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if schema.XPreserveUnknownFields != nil && *schema.XPreserveUnknownFields {
		return false
	}
	if t.Implements(jsonMarshaler) || reflect.PointerTo(t).Implements(jsonMarshaler) {
		return len(schema.Properties) == 0 // a value with its own JSON form, such as metav1.Time, is a string
	}
	switch t.Kind() {
	case reflect.Struct:
		if schema.AdditionalProperties != nil {
			return false
		}
		fields := jsonFields(t)
		for name := range schema.Properties {
			field, ok := fields[name]
			prop := schema.Properties[name]
			if !ok || !schemaFits(&prop, field) {
				return false
			}
		}
		return true
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return len(schema.Properties) == 0 // []byte is a base64 string
		}
		return schema.Items == nil || schema.Items.Schema == nil || schemaFits(schema.Items.Schema, t.Elem())
	case reflect.Map:
		return schema.AdditionalProperties == nil || schema.AdditionalProperties.Schema == nil ||
			schemaFits(schema.AdditionalProperties.Schema, t.Elem())
	default:
		return len(schema.Properties) == 0 && schema.Items == nil
	}
}

// jsonFields maps the JSON names of a struct's fields, those of inlined structs included, to their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if f.Anonymous && (name == "" || strings.Contains(opts, "inline")) && f.Type.Kind() == reflect.Struct {
			for n, ft := range jsonFields(f.Type) {
				out[n] = ft
			}
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}
