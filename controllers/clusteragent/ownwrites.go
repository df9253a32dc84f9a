package clusteragent

import (
	"reflect"
	"sync"

	ctrl "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// ownWrites keeps the watch events of a pass's own writes from queuing another pass that would only find them in
// place: at a thousand clusters that second pass was half of all passes, and it could act on input that changed
// after the pass without an event of its own. An event is the pass's own when the object carries a resourceVersion
// the pass wrote; any other writer's change carries another.
//
// The event of a write often comes before the write's answer, so before the pass knows the version. An event that
// comes while a write of its object is under way is therefore held until the write ends: then it is dropped if it
// was the write's, else its cluster is queued (Foreign). A pass writes an object at most twice (create, then status),
// so two versions are kept per object, each forgotten once its event came, all of them when the object is deleted.
type ownWrites struct {
	mu      sync.Mutex
	objects map[ownKey]*ownState
	once    sync.Once
	foreign chan event.TypedGenericEvent[string] // see Foreign
}

type ownKey struct {
	kind            reflect.Type
	namespace, name string
}

type ownState struct {
	versions [2]string // the last two written
	writing  bool
	held     []string // versions of the events that came while writing
}

func keyOf(obj ctrl.Object) ownKey {
	return ownKey{kind: reflect.TypeOf(obj), namespace: obj.GetNamespace(), name: obj.GetName()}
}

// state is the object's state, created when missing; mu is held.
func (w *ownWrites) state(k ownKey) *ownState {
	if w.objects == nil {
		w.objects = map[ownKey]*ownState{}
	}
	st := w.objects[k]
	if st == nil {
		st = &ownState{}
		w.objects[k] = st
	}
	return st
}

// tidy drops a state with nothing left in it; mu is held.
func (w *ownWrites) tidy(k ownKey, st *ownState) {
	if st.versions == [2]string{} && !st.writing && len(st.held) == 0 {
		delete(w.objects, k)
	}
}

// consume reports whether version is one written, and forgets it; mu is held.
func (st *ownState) consume(version string) bool {
	for i := range st.versions {
		if version != "" && st.versions[i] == version {
			st.versions[i] = ""
			return true
		}
	}
	return false
}

// begin marks a write of obj as under way; end must follow.
func (w *ownWrites) begin(obj ctrl.Object) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.state(keyOf(obj)).writing = true
}

// end closes the write begin opened: written is the object as the write answered it, nil when nothing was written.
// The events held meanwhile are dropped when they were this write's, and their cluster queued when not.
func (w *ownWrites) end(obj, written ctrl.Object) {
	w.mu.Lock()
	k := keyOf(obj)
	st := w.state(k)
	st.writing = false
	if written != nil && written.GetResourceVersion() != "" {
		st.versions = [2]string{st.versions[1], written.GetResourceVersion()}
	}
	foreign := false
	for _, v := range st.held {
		if !st.consume(v) {
			foreign = true
		}
	}
	st.held = nil
	w.tidy(k, st)
	w.mu.Unlock()
	if foreign {
		w.Foreign() // made
		w.foreign <- event.TypedGenericEvent[string]{Object: k.namespace}
	}
}

// own reports whether the event of obj is a pass's own, or held until the write under way ends.
func (w *ownWrites) own(obj ctrl.Object) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	k := keyOf(obj)
	st := w.objects[k]
	switch {
	case st == nil:
		return false
	case st.consume(obj.GetResourceVersion()):
		w.tidy(k, st)
		return true
	case st.writing:
		st.held = append(st.held, obj.GetResourceVersion())
		return true
	}
	return false
}

func (w *ownWrites) forget(obj ctrl.Object) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if st := w.objects[keyOf(obj)]; st != nil && !st.writing {
		delete(w.objects, keyOf(obj))
	}
}

// notOwn lets through the events of every change but the passes' own writes; deletions always.
func (w *ownWrites) notOwn() predicate.Predicate {
	return predicate.Funcs{
		CreateFunc: func(e event.CreateEvent) bool { return !w.own(e.Object) },
		UpdateFunc: func(e event.UpdateEvent) bool { return !w.own(e.ObjectNew) },
		DeleteFunc: func(e event.DeleteEvent) bool {
			w.forget(e.Object)
			return true
		},
		GenericFunc: func(event.GenericEvent) bool { return true },
	}
}

// Foreign delivers the clusters (namespaces) whose held event turned out to be another writer's.
func (w *ownWrites) Foreign() <-chan event.TypedGenericEvent[string] {
	w.once.Do(func() { w.foreign = make(chan event.TypedGenericEvent[string], 1024) })
	return w.foreign
}
