package gateway

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/registry/rest"

	gatewayv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/gateway/v1alpha1"
)

// resource is clusters.gateway.proxy.open-cluster-management.io, as errors name it.
var resource = schema.GroupResource{Group: gatewayv1alpha1.GroupVersion.Group, Resource: gatewayv1alpha1.Resource}

// clusterSet is the clusters the API shows, kept up to date from what the operator publishes; watchers hear every
// change.
type clusterSet struct {
	mu       sync.RWMutex
	clusters map[string]*gatewayv1alpha1.Cluster
	synced   bool
	watchers map[*clusterWatch]struct{}
}

func newClusterSet() *clusterSet {
	return &clusterSet{clusters: map[string]*gatewayv1alpha1.Cluster{}, watchers: map[*clusterWatch]struct{}{}}
}

// set adds or replaces a cluster and tells the watchers.
func (s *clusterSet) set(c *gatewayv1alpha1.Cluster) {
	s.mu.Lock()
	defer s.mu.Unlock()
	kind := watch.Modified
	if _, ok := s.clusters[c.Name]; !ok {
		kind = watch.Added
	}
	s.clusters[c.Name] = c
	s.notify(watch.Event{Type: kind, Object: c.DeepCopy()})
}

// remove drops a cluster and tells the watchers.
func (s *clusterSet) remove(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.clusters[name]
	if !ok {
		return
	}
	delete(s.clusters, name)
	s.notify(watch.Event{Type: watch.Deleted, Object: c.DeepCopy()})
}

func (s *clusterSet) markSynced() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.synced = true
}

// has reports whether the cluster exists, without copying it: every proxied request asks.
func (s *clusterSet) has(name string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	_, ok := s.clusters[name]
	return ok
}

func (s *clusterSet) get(name string) (*gatewayv1alpha1.Cluster, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	c, ok := s.clusters[name]
	if !ok {
		return nil, false
	}
	return c.DeepCopy(), true
}

func (s *clusterSet) list() []gatewayv1alpha1.Cluster {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]gatewayv1alpha1.Cluster, 0, len(s.clusters))
	for _, c := range s.clusters {
		out = append(out, *c.DeepCopy())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// notify sends ev to every watcher; one that does not keep up is ended (its client lists and watches again) rather
// than holding up the others. Called with mu held.
func (s *clusterSet) notify(ev watch.Event) {
	for w := range s.watchers {
		select {
		case w.events <- ev:
		default:
			delete(s.watchers, w)
			w.closeLocked()
		}
	}
}

// watchBufferSize is how many events a watcher may fall behind by.
const watchBufferSize = 256

// watch starts with an ADDED event for every cluster, then follows the changes.
func (s *clusterSet) watch(ctx context.Context) watch.Interface {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := &clusterWatch{set: s, events: make(chan watch.Event, max(watchBufferSize, 2*len(s.clusters))), done: make(chan struct{})}
	for _, c := range s.clusters {
		w.events <- watch.Event{Type: watch.Added, Object: c.DeepCopy()}
	}
	s.watchers[w] = struct{}{}
	go func() {
		select {
		case <-ctx.Done():
			w.Stop()
		case <-w.done:
		}
	}()
	return w
}

type clusterWatch struct {
	set    *clusterSet
	events chan watch.Event
	done   chan struct{}
	once   sync.Once
}

func (w *clusterWatch) ResultChan() <-chan watch.Event { return w.events }

func (w *clusterWatch) Stop() {
	w.set.mu.Lock()
	defer w.set.mu.Unlock()
	if _, ok := w.set.watchers[w]; ok {
		delete(w.set.watchers, w)
		w.closeLocked()
	}
}

func (w *clusterWatch) closeLocked() {
	w.once.Do(func() {
		close(w.done)
		close(w.events)
	})
}

// clusterStorage serves clusters: get, list and watch, read-only.
type clusterStorage struct {
	set *clusterSet
	rest.TableConvertor
}

var (
	_ rest.Getter               = &clusterStorage{}
	_ rest.Lister               = &clusterStorage{}
	_ rest.Watcher              = &clusterStorage{}
	_ rest.Scoper               = &clusterStorage{}
	_ rest.SingularNameProvider = &clusterStorage{}
)

func newClusterStorage(set *clusterSet) *clusterStorage {
	return &clusterStorage{set: set, TableConvertor: clusterTable{}}
}

func (*clusterStorage) New() runtime.Object     { return &gatewayv1alpha1.Cluster{} }
func (*clusterStorage) NewList() runtime.Object { return &gatewayv1alpha1.ClusterList{} }
func (*clusterStorage) Destroy()                {}
func (*clusterStorage) NamespaceScoped() bool   { return false }
func (*clusterStorage) GetSingularName() string { return "cluster" }

func (s *clusterStorage) Get(_ context.Context, name string, _ *metav1.GetOptions) (runtime.Object, error) {
	c, ok := s.set.get(name)
	if !ok {
		return nil, apierrors.NewNotFound(resource, name)
	}
	return c, nil
}

func (s *clusterStorage) List(_ context.Context, opts *metainternalversion.ListOptions) (runtime.Object, error) {
	out := &gatewayv1alpha1.ClusterList{}
	for _, c := range s.set.list() {
		if matches(&c, opts) {
			out.Items = append(out.Items, c)
		}
	}
	return out, nil
}

func (s *clusterStorage) Watch(ctx context.Context, opts *metainternalversion.ListOptions) (watch.Interface, error) {
	w := s.set.watch(ctx)
	if opts == nil || (opts.LabelSelector == nil || opts.LabelSelector.Empty()) && (opts.FieldSelector == nil || opts.FieldSelector.Empty()) {
		return w, nil
	}
	return watch.Filter(w, func(ev watch.Event) (watch.Event, bool) {
		c, ok := ev.Object.(*gatewayv1alpha1.Cluster)
		return ev, ok && matches(c, opts)
	}), nil
}

// matches applies a list's label selector and its metadata.name field selector (the one kubectl get <name> -w uses).
func matches(c *gatewayv1alpha1.Cluster, opts *metainternalversion.ListOptions) bool {
	if opts == nil {
		return true
	}
	if opts.LabelSelector != nil && !opts.LabelSelector.Matches(labelSet(c.Labels)) {
		return false
	}
	if opts.FieldSelector != nil && !opts.FieldSelector.Matches(fieldSet{"metadata.name": c.Name}) {
		return false
	}
	return true
}

type labelSet map[string]string

func (l labelSet) Has(k string) bool              { _, ok := l[k]; return ok }
func (l labelSet) Get(k string) string            { return l[k] }
func (l labelSet) Lookup(k string) (string, bool) { v, ok := l[k]; return v, ok }

type fieldSet map[string]string

func (f fieldSet) Has(k string) bool   { _, ok := f[k]; return ok }
func (f fieldSet) Get(k string) string { return f[k] }

func age(t metav1.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(time.Since(t.Time))
}

// clusterTable is what kubectl get clusters shows.
type clusterTable struct{}

func (clusterTable) ConvertToTable(_ context.Context, obj runtime.Object, _ runtime.Object) (*metav1.Table, error) {
	t := &metav1.Table{ColumnDefinitions: []metav1.TableColumnDefinition{
		{Name: "Name", Type: "string", Format: "name", Description: "the managed cluster"},
		{Name: "Installed", Type: "boolean", Description: "the agent is deployed"},
		{Name: "Available", Type: "boolean", Description: "the cluster is reachable through its tunnel"},
		{Name: "Agents", Type: "integer", Description: "agent replicas every proxy-server replica holds"},
		{Name: "Probed Health", Type: "string", Description: "the last probe through the tunnel"},
		{Name: "Latency", Type: "string", Description: "that probe's round trip"},
		{Name: "Age", Type: "date", Description: "since the cluster got the add-on"},
	}}
	row := func(c *gatewayv1alpha1.Cluster) metav1.TableRow {
		return metav1.TableRow{Object: runtime.RawExtension{Object: c}, Cells: []any{c.Name, c.Status.Installed,
			c.Status.Available, c.Status.ConnectedAgents, c.Status.ProbedHealth, c.Status.Latency, age(c.CreationTimestamp)}}
	}
	switch o := obj.(type) {
	case *gatewayv1alpha1.Cluster:
		t.Rows = []metav1.TableRow{row(o)}
	case *gatewayv1alpha1.ClusterList:
		for i := range o.Items {
			t.Rows = append(t.Rows, row(&o.Items[i]))
		}
	default:
		return nil, fmt.Errorf("cannot show %T as a table", obj)
	}
	return t, nil
}
