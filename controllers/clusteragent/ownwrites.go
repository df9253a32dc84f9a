package clusteragent

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// ownWrites remembers the resourceVersions the passes wrote, so the watch events of a pass's own writes do not queue
// another pass that would only find them in place: at a thousand clusters that second pass was a third of the
// manager's reconcile work, and it could act on input that changed after the pass without an event of its own. An
// event is the pass's own when the object carries a resourceVersion a pass wrote; any other writer's change carries
// another. A pass writes an object at most twice (create, then status), so two versions are kept per object, each
// forgotten once its event came, all of them when the object is deleted.
type ownWrites struct {
	mu       sync.Mutex
	versions map[types.UID][2]string
}

// wrote records obj as the write answered it.
func (w *ownWrites) wrote(obj ctrl.Object) {
	if obj == nil || obj.GetUID() == "" || obj.GetResourceVersion() == "" {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.versions == nil {
		w.versions = map[types.UID][2]string{}
	}
	v := w.versions[obj.GetUID()]
	w.versions[obj.GetUID()] = [2]string{v[1], obj.GetResourceVersion()}
}

// own reports whether obj, as an event shows it, is a pass's own write, and forgets that write.
func (w *ownWrites) own(obj ctrl.Object) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	uid, rv := obj.GetUID(), obj.GetResourceVersion()
	v, ok := w.versions[uid]
	switch {
	case !ok || rv == "":
		return false
	case v[1] == rv:
		v[1] = ""
	case v[0] == rv:
		v[0] = ""
	default:
		return false
	}
	if v == [2]string{} {
		delete(w.versions, uid)
	} else {
		w.versions[uid] = v
	}
	return true
}

func (w *ownWrites) forget(obj ctrl.Object) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.versions, obj.GetUID())
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
