package index

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
)

func TestRequestsAreTheListedObjectsOfAnIndex(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := proxyv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	cert := func(ns, name, issuer string) client.Object {
		pc := &proxyv1alpha1.ProxyCertificate{}
		pc.Namespace, pc.Name, pc.Spec.IssuerRef.Name = ns, name, issuer
		return pc
	}
	c := fake.NewClientBuilder().WithScheme(scheme).
		WithObjects(cert("a", "one", "hub"), cert("b", "two", "hub"), cert("a", "three", "edge")).
		WithIndex(&proxyv1alpha1.ProxyCertificate{}, IssuerName, func(o client.Object) []string {
			return []string{o.(*proxyv1alpha1.ProxyCertificate).Spec.IssuerRef.Name}
		}).Build()
	got := Requests(context.Background(), c, &proxyv1alpha1.ProxyCertificateList{}, client.MatchingFields{IssuerName: "hub"})
	want := map[reconcile.Request]bool{
		{NamespacedName: client.ObjectKey{Namespace: "a", Name: "one"}}: true,
		{NamespacedName: client.ObjectKey{Namespace: "b", Name: "two"}}: true,
	}
	if len(got) != len(want) {
		t.Fatalf("got %v; want %v", got, want)
	}
	for _, r := range got {
		if !want[r] {
			t.Fatalf("got %v; want %v", got, want)
		}
	}
	if all := Requests(context.Background(), c, &proxyv1alpha1.ProxyCertificateList{}); len(all) != 3 {
		t.Fatalf("without an index: %v", all)
	}
}
