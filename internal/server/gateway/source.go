package gateway

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	gatewayv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/gateway/v1alpha1"
	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
)

// followStatuses keeps set equal to the hub's ClusterProxyStatuses (the operator's per-cluster view), one Cluster each,
// until ctx ends. It returns once the first list is in.
func followStatuses(ctx context.Context, hub *rest.Config, set *clusterSet) error {
	client, err := dynamic.NewForConfig(hub)
	if err != nil {
		return fmt.Errorf("hub client: %w", err)
	}
	factory := dynamicinformer.NewDynamicSharedInformerFactory(client, 0)
	informer := factory.ForResource(proxyv1alpha1.GroupVersion.WithResource("clusterproxystatuses")).Informer()
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { setFrom(set, obj) },
		UpdateFunc: func(_, obj any) { setFrom(set, obj) },
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if cps, ok := toStatus(obj); ok {
				set.remove(clusterName(cps))
			}
		},
	}); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return fmt.Errorf("list the hub's ClusterProxyStatuses: %w", context.Cause(ctx))
	}
	set.markSynced()
	return nil
}

func setFrom(set *clusterSet, obj any) {
	if cps, ok := toStatus(obj); ok {
		set.set(clusterOf(cps))
	}
}

func toStatus(obj any) (*proxyv1alpha1.ClusterProxyStatus, bool) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, false
	}
	cps := &proxyv1alpha1.ClusterProxyStatus{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, cps); err != nil {
		return nil, false
	}
	return cps, true
}

func clusterName(cps *proxyv1alpha1.ClusterProxyStatus) string {
	if cps.Spec.ClusterName != "" {
		return cps.Spec.ClusterName
	}
	return cps.Namespace
}

// clusterOf is the Cluster a ClusterProxyStatus describes.
func clusterOf(cps *proxyv1alpha1.ClusterProxyStatus) *gatewayv1alpha1.Cluster {
	c := &gatewayv1alpha1.Cluster{
		TypeMeta: metav1.TypeMeta{APIVersion: gatewayv1alpha1.GroupVersion.String(), Kind: "Cluster"},
		ObjectMeta: metav1.ObjectMeta{Name: clusterName(cps), UID: cps.UID, ResourceVersion: cps.ResourceVersion,
			CreationTimestamp: cps.CreationTimestamp},
		Status: gatewayv1alpha1.ClusterStatus{
			Installed:       cps.Status.Installed,
			Available:       cps.Status.Available,
			ConnectedAgents: cps.Status.ConnectedAgents,
			AgentNamespace:  cps.Status.AgentNamespace,
			Conditions:      cps.Status.Conditions,
		},
	}
	if p := cps.Status.Probe; p != nil {
		c.Status.ProbedHealth, c.Status.Latency, c.Status.LastProbeTime = p.Health, p.Latency, p.LastProbeTime
	}
	return c
}
