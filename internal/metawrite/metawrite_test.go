package metawrite

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/scheme"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/testenv"
)

// answers records the kind of every answer to a write.
type answers struct {
	mu    sync.Mutex
	kinds []string
}

func (a *answers) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		if err != nil || req.Method == http.MethodGet {
			return resp, err
		}
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil {
			return nil, err
		}
		resp.Body = io.NopCloser(bytes.NewReader(body))
		var tm metav1.TypeMeta
		_ = json.Unmarshal(body, &tm)
		a.mu.Lock()
		a.kinds = append(a.kinds, req.Method+" "+tm.Kind)
		a.mu.Unlock()
		return resp, nil
	})
}

func (a *answers) take() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := a.kinds
	a.kinds = nil
	return out
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestWritesAreAnsweredWithTheMetadataTheWriterNeeds: creates, updates and status updates of a custom resource and a
// core object come back as metadata, which the object takes (its resourceVersion locks the next write); the rest
// stays as sent; the API's errors stay the API's.
func TestWritesAreAnsweredWithTheMetadataTheWriterNeeds(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	env, err := testenv.NewHub()
	g.Expect(err).NotTo(HaveOccurred())
	cfg, err := env.Start()
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = env.Stop() })
	recorded := &answers{}
	cfg = rest.CopyConfig(cfg)
	cfg.WrapTransport = recorded.wrap
	inner, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	g.Expect(err).NotTo(HaveOccurred())
	rc, err := RESTClient(cfg, nil, serializer.NewCodecFactory(inner.Scheme()).WithoutConversion())
	g.Expect(err).NotTo(HaveOccurred())
	c := NewClient(inner, rc)

	cps := &proxyv1alpha1.ClusterProxyStatus{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "cluster-proxy", Labels: map[string]string{"a": "b"}},
		Spec:       proxyv1alpha1.ClusterProxyStatusSpec{ClusterName: "cluster1"},
	}
	g.Expect(c.Create(ctx, cps, client.FieldOwner("writer"))).To(Succeed())
	g.Expect(recorded.take()).To(Equal([]string{"POST PartialObjectMetadata"}))
	g.Expect(cps.ResourceVersion).NotTo(BeEmpty())
	g.Expect(cps.UID).NotTo(BeEmpty())
	g.Expect(cps.CreationTimestamp.IsZero()).To(BeFalse())
	g.Expect(cps.ManagedFields).To(ContainElement(HaveField("Manager", "writer")), "the field manager is the writer's")
	g.Expect(cps.Spec.ClusterName).To(Equal("cluster1"), "the spec stays as sent")
	g.Expect(cps.Labels).To(Equal(map[string]string{"a": "b"}))

	created := cps.ResourceVersion
	cps.Status.Installed = true
	g.Expect(c.Status().Update(ctx, cps)).To(Succeed())
	g.Expect(recorded.take()).To(Equal([]string{"PUT PartialObjectMetadata"}))
	g.Expect(cps.ResourceVersion).NotTo(Equal(created))
	g.Expect(cps.Status.Installed).To(BeTrue())

	// Locked to the status write's resourceVersion: no conflict.
	cps.Labels["c"] = "d"
	g.Expect(c.Update(ctx, cps)).To(Succeed())
	g.Expect(recorded.take()).To(Equal([]string{"PUT PartialObjectMetadata"}))
	stored := &proxyv1alpha1.ClusterProxyStatus{}
	g.Expect(inner.Get(ctx, client.ObjectKeyFromObject(cps), stored)).To(Succeed())
	g.Expect(stored.ResourceVersion).To(Equal(cps.ResourceVersion))
	g.Expect(stored.Labels).To(Equal(map[string]string{"a": "b", "c": "d"}))
	g.Expect(stored.Status.Installed).To(BeTrue())

	stale := stored.DeepCopy()
	stale.ResourceVersion = created
	g.Expect(apierrors.IsConflict(c.Update(ctx, stale))).To(BeTrue(), "a stale write is the API's conflict")
	again := &proxyv1alpha1.ClusterProxyStatus{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "cluster-proxy"},
		Spec: proxyv1alpha1.ClusterProxyStatusSpec{ClusterName: "cluster1"}}
	g.Expect(apierrors.IsAlreadyExists(c.Create(ctx, again))).To(BeTrue())
	invalid := &proxyv1alpha1.ClusterProxyStatus{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "invalid"}}
	err = c.Create(ctx, invalid)
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
	g.Expect(err.Error()).To(ContainSubstring("spec.clusterName"))
	recorded.take()

	// A core object: the legacy API's path.
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "settings"}, Data: map[string]string{"k": "v"}}
	g.Expect(c.Create(ctx, cm)).To(Succeed())
	g.Expect(recorded.take()).To(Equal([]string{"POST PartialObjectMetadata"}))
	g.Expect(cm.ResourceVersion).NotTo(BeEmpty())
	g.Expect(cm.Data).To(Equal(map[string]string{"k": "v"}))
	g.Expect(inner.Get(ctx, client.ObjectKeyFromObject(cm), &corev1.ConfigMap{})).To(Succeed())
}

// TestAWholeObjectAnswerIsTakenWhole: a server that does not transform its answers sends the whole object, which
// replaces what was sent.
func TestAWholeObjectAnswerIsTakenWhole(t *testing.T) {
	g := NewWithT(t)
	sent := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "settings"}, Data: map[string]string{"k": "v", "gone": "x"}}
	answer := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"namespace":"default","name":"settings","resourceVersion":"7"},"data":{"k":"v"}}`
	g.Expect(takeAnswer([]byte(answer), sent)).To(Succeed())
	g.Expect(sent.ResourceVersion).To(Equal("7"))
	g.Expect(sent.Data).To(Equal(map[string]string{"k": "v"}))

	partial := `{"apiVersion":"meta.k8s.io/v1","kind":"PartialObjectMetadata","metadata":{"namespace":"default","name":"settings","resourceVersion":"8"}}`
	g.Expect(takeAnswer([]byte(partial), sent)).To(Succeed())
	g.Expect(sent.ResourceVersion).To(Equal("8"))
	g.Expect(sent.Data).To(Equal(map[string]string{"k": "v"}), "a metadata answer leaves the rest as sent")
}

// metaless is a client.Object without an ObjectMeta field.
type metaless struct {
	metav1.TypeMeta
	metav1.Object
}

func (m *metaless) DeepCopyObject() runtime.Object {
	return &metaless{TypeMeta: m.TypeMeta, Object: m.Object}
}

// TestOnlyTypedObjectsWithTheirOwnMetadataAreAnsweredWithMetadata: unstructured objects and types that hold their
// metadata elsewhere go to the wrapped client.
func TestOnlyTypedObjectsWithTheirOwnMetadataAreAnsweredWithMetadata(t *testing.T) {
	g := NewWithT(t)
	c := &metaClient{}
	g.Expect(c.handles(&corev1.ConfigMap{})).To(BeTrue())
	g.Expect(c.handles(&unstructured.Unstructured{})).To(BeFalse())
	g.Expect(c.handles(&metaless{Object: &metav1.ObjectMeta{}})).To(BeFalse())
}
