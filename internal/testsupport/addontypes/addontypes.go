// Package addontypes stands in for a client built on the existing OCM cluster-proxy add-on's Go types: what such a
// client writes back after reading a ManagedProxyConfiguration, whose spec then lacks every field the add-on's types
// do not have.
package addontypes

import (
	"context"
	"encoding/json"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
)

// specSchema is the add-on's ManagedProxyConfiguration spec: the fields its types hold; nil keeps a value whole.
var specSchema = map[string]any{
	"authentication": map[string]any{
		"signer": map[string]any{"type": nil, "selfSigned": map[string]any{"additionalSANs": nil}},
		"dump":   map[string]any{"secrets": nil},
	},
	"proxyServer": map[string]any{"image": nil, "replicas": nil, "inClusterServiceName": nil, "namespace": nil,
		"entrypoint": nil, "additionalArgs": nil, "nodePlacement": nil},
	"proxyAgent": map[string]any{"image": nil, "replicas": nil, "additionalArgs": nil, "additionalServiceProxyArgs": nil,
		"imagePullSecrets": nil, "additionalServiceCAConfigMap": nil},
	"deploy":     map[string]any{"ports": map[string]any{"proxyServer": nil, "agentServer": nil, "healthServer": nil, "adminServer": nil}},
	"userServer": map[string]any{"additionalSANs": nil},
}

// Spec keeps of a spec (as JSON decodes it) what the add-on's types hold.
func Spec(spec any) any { return prune(spec, specSchema) }

func prune(v any, schema any) any {
	fields, ok := schema.(map[string]any)
	obj, isObj := v.(map[string]any)
	if !ok || !isObj {
		return v
	}
	out := map[string]any{}
	for k, sub := range fields {
		if val, found := obj[k]; found {
			out[k] = prune(val, sub)
		}
	}
	return out
}

// RoundTrip is mpc as such a client holds it after reading it: metadata and status whole, the spec pruned.
func RoundTrip(mpc *proxyv1alpha1.ManagedProxyConfiguration) (*proxyv1alpha1.ManagedProxyConfiguration, error) {
	raw, err := json.Marshal(mpc)
	if err != nil {
		return nil, err
	}
	var obj map[string]any
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, err
	}
	obj["spec"] = Spec(obj["spec"])
	if raw, err = json.Marshal(obj); err != nil {
		return nil, err
	}
	out := &proxyv1alpha1.ManagedProxyConfiguration{}
	return out, json.Unmarshal(raw, out)
}

// Update reads the configuration name, lets change edit its spec as the add-on's types hold it, and writes it back
// with Update, as a client of those types does (the add-on's own tests change spec.authentication.signer.selfSigned
// .additionalSANs this way).
func Update(ctx context.Context, c client.Client, name string, change func(spec map[string]any)) error {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(proxyv1alpha1.GroupVersion.WithKind("ManagedProxyConfiguration"))
	if err := c.Get(ctx, client.ObjectKey{Name: name}, u); err != nil {
		return err
	}
	spec, _ := Spec(u.Object["spec"]).(map[string]any)
	change(spec)
	u.Object["spec"] = spec
	return c.Update(ctx, u)
}
