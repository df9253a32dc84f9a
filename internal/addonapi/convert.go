package addonapi

import (
	"fmt"
	"maps"
	"reflect"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	addonv1beta1 "open-cluster-management.io/api/addon/v1beta1"
)

// InstallNamespaceAnnotation carries a ManagedClusterAddOn's v1alpha1 spec.installNamespace, which v1beta1 lacks, as
// OCM's conversion webhook carries it.
const InstallNamespaceAnnotation = "addon.open-cluster-management.io/v1alpha1-install-namespace"

// conversions holds both versions and the add-on API's own conversion functions between them.
var conversions = func() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(addonv1alpha1.Install(s))
	utilruntime.Must(addonv1beta1.Install(s))
	return s
}()

// pairs are the add-on API's kinds, and their lists, that travel as v1beta1: each as the operator's model (v1alpha1)
// and as it travels.
var pairs = []struct{ model, wire runtime.Object }{
	{&addonv1alpha1.ManagedClusterAddOn{}, &addonv1beta1.ManagedClusterAddOn{}},
	{&addonv1alpha1.ManagedClusterAddOnList{}, &addonv1beta1.ManagedClusterAddOnList{}},
	{&addonv1alpha1.ClusterManagementAddOn{}, &addonv1beta1.ClusterManagementAddOn{}},
	{&addonv1alpha1.ClusterManagementAddOnList{}, &addonv1beta1.ClusterManagementAddOnList{}},
	{&addonv1alpha1.AddOnDeploymentConfig{}, &addonv1beta1.AddOnDeploymentConfig{}},
	{&addonv1alpha1.AddOnDeploymentConfigList{}, &addonv1beta1.AddOnDeploymentConfigList{}},
}

var (
	// wireTypes and modelTypes map each type of pairs to the other's.
	wireTypes, modelTypes = map[reflect.Type]reflect.Type{}, map[reflect.Type]reflect.Type{}
	// wireKinds are the kinds of pairs, lists aside.
	wireKinds = map[string]bool{}
)

func init() {
	for _, p := range pairs {
		model, wire := reflect.TypeOf(p.model), reflect.TypeOf(p.wire)
		wireTypes[model], modelTypes[wire] = wire, model
		if !meta.IsListType(p.model) {
			wireKinds[model.Elem().Name()] = true
		}
	}
}

// wireOf returns an empty v1beta1 object for a v1alpha1 add-on object or list, and false for any other object.
func wireOf(obj runtime.Object) (runtime.Object, bool) { return counterpart(wireTypes, obj) }

// modelOf returns an empty v1alpha1 object for a v1beta1 add-on object or list, and false for any other object.
func modelOf(obj runtime.Object) (runtime.Object, bool) { return counterpart(modelTypes, obj) }

func counterpart(types map[reflect.Type]reflect.Type, obj runtime.Object) (runtime.Object, bool) {
	t, ok := types[reflect.TypeOf(obj)]
	if !ok {
		return nil, false
	}
	return reflect.New(t.Elem()).Interface().(runtime.Object), true
}

// ToWire converts a v1alpha1 add-on object or list into out, its v1beta1 counterpart; in is not changed and out
// shares nothing with it.
func ToWire(in, out runtime.Object) error {
	return convert(in.DeepCopyObject(), out, addonv1beta1.SchemeGroupVersion.WithKind)
}

// FromWire converts a v1beta1 add-on object or list into out, its v1alpha1 counterpart, replacing all of out.
func FromWire(in, out runtime.Object) error {
	fresh := reflect.New(reflect.TypeOf(out).Elem()).Interface().(runtime.Object)
	if err := convert(in.DeepCopyObject(), fresh, addonv1alpha1.SchemeGroupVersion.WithKind); err != nil {
		return err
	}
	reflect.ValueOf(out).Elem().Set(reflect.ValueOf(fresh).Elem())
	return nil
}

// convert converts in into out with the add-on API's conversions plus what OCM's webhook adds to them: the install
// namespace in an annotation, and v1alpha1's config referent taken from the desired config. in must be a private
// copy: out shares its memory.
func convert(in, out runtime.Object, gvk func(kind string) schema.GroupVersionKind) error {
	if err := conversions.Convert(in, out, nil); err != nil {
		return fmt.Errorf("convert %T to %T: %w", in, out, err)
	}
	switch in := in.(type) {
	case *addonv1alpha1.ManagedClusterAddOn:
		installNamespaceToAnnotation(in, out.(*addonv1beta1.ManagedClusterAddOn))
	case *addonv1alpha1.ManagedClusterAddOnList:
		items := out.(*addonv1beta1.ManagedClusterAddOnList).Items
		for i := range in.Items {
			installNamespaceToAnnotation(&in.Items[i], &items[i])
		}
	case *addonv1beta1.ManagedClusterAddOn:
		addOnFromWire(in, out.(*addonv1alpha1.ManagedClusterAddOn))
	case *addonv1beta1.ManagedClusterAddOnList:
		items := out.(*addonv1alpha1.ManagedClusterAddOnList).Items
		for i := range in.Items {
			addOnFromWire(&in.Items[i], &items[i])
		}
	}
	out.GetObjectKind().SetGroupVersionKind(gvk(reflect.TypeOf(out).Elem().Name()))
	return nil
}

func installNamespaceToAnnotation(in *addonv1alpha1.ManagedClusterAddOn, out *addonv1beta1.ManagedClusterAddOn) {
	if in.Spec.InstallNamespace == "" {
		return
	}
	if out.Annotations == nil {
		out.Annotations = map[string]string{}
	}
	out.Annotations[InstallNamespaceAnnotation] = in.Spec.InstallNamespace
}

func addOnFromWire(in *addonv1beta1.ManagedClusterAddOn, out *addonv1alpha1.ManagedClusterAddOn) {
	if namespace, ok := in.Annotations[InstallNamespaceAnnotation]; ok {
		out.Spec.InstallNamespace = namespace
		out.Annotations = maps.Clone(out.Annotations)
		delete(out.Annotations, InstallNamespaceAnnotation)
		if len(out.Annotations) == 0 {
			out.Annotations = nil
		}
	}
	for i := range out.Status.ConfigReferences {
		if desired := out.Status.ConfigReferences[i].DesiredConfig; desired != nil {
			out.Status.ConfigReferences[i].ConfigReferent = desired.ConfigReferent
		}
	}
}
