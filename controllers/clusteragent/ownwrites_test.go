package clusteragent

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

func version(namespace, rv string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "status", ResourceVersion: rv}}
}

func TestOwnWritesLetThroughEveryChangeButThePassesOwn(t *testing.T) {
	var w ownWrites
	p := w.notOwn()
	passes := func(obj *corev1.ConfigMap) bool { return p.Update(event.UpdateEvent{ObjectOld: obj, ObjectNew: obj}) }
	foreign := func() []string {
		var out []string
		for {
			select {
			case e := <-w.Foreign():
				out = append(out, e.Object)
			default:
				return out
			}
		}
	}

	// A pass creates an object (version 1), then writes its status (version 2); the events come after the answers.
	w.begin(version("a", ""))
	w.end(version("a", ""), version("a", "1"))
	w.begin(version("a", "1"))
	w.end(version("a", "1"), version("a", "2"))
	if !passes(version("b", "1")) {
		t.Error("another object's change was held back")
	}
	if !passes(version("a", "3")) {
		t.Error("another writer's change was held back")
	}
	if p.Create(event.CreateEvent{Object: version("a", "1")}) {
		t.Error("the event of the pass's create queued a pass")
	}
	if passes(version("a", "2")) {
		t.Error("the event of the pass's status write queued a pass")
	}
	if !passes(version("a", "2")) {
		t.Error("a write's version is forgotten once its event came: a resync of it is let through")
	}

	// The event of a write comes before its answer: it is held, then dropped as the write's own.
	w.begin(version("c", "1"))
	if passes(version("c", "2")) {
		t.Error("an event during a write was let through before the write ended")
	}
	w.end(version("c", "1"), version("c", "2"))
	if got := foreign(); len(got) != 0 {
		t.Errorf("the write's own early event queued %v", got)
	}

	// Another writer's event during a write (whose write then fails, or writes nothing): held, then its cluster queued.
	w.begin(version("d", "1"))
	if passes(version("d", "7")) {
		t.Error("an event during a write was let through before the write ended")
	}
	w.end(version("d", "1"), nil)
	if got := foreign(); len(got) != 1 || got[0] != "d" {
		t.Errorf("another writer's event held during a write queued %v, want [d]", got)
	}

	// Another writer's event during a write that succeeds: held, then its cluster queued; the write's own event,
	// which comes after, is still dropped.
	w.begin(version("f", "1"))
	if passes(version("f", "7")) {
		t.Error("an event during a write was let through before the write ended")
	}
	w.end(version("f", "1"), version("f", "8"))
	if got := foreign(); len(got) != 1 || got[0] != "f" {
		t.Errorf("another writer's event held during a successful write queued %v, want [f]", got)
	}
	if passes(version("f", "8")) {
		t.Error("the event of the write that ended after another writer's event queued a pass")
	}

	// A create's event that comes during the status write after it is the pass's own, like the status write's.
	w.begin(version("g", ""))
	w.end(version("g", ""), version("g", "1"))
	w.begin(version("g", "1"))
	if passes(version("g", "1")) || passes(version("g", "2")) {
		t.Error("the events of a create and of the status write under way were let through")
	}
	w.end(version("g", "1"), version("g", "2"))
	if got := foreign(); len(got) != 0 {
		t.Errorf("the pass's own events queued %v", got)
	}

	// Two versions are kept per object; a third write pushes out the oldest.
	for _, v := range []string{"1", "2", "3"} {
		w.begin(version("e", ""))
		w.end(version("e", ""), version("e", v))
	}
	if !passes(version("e", "1")) {
		t.Error("a version older than the last two is still held back")
	}
	if !p.Delete(event.DeleteEvent{Object: version("e", "3")}) {
		t.Error("a deletion was held back")
	}
	if len(w.objects) != 0 {
		t.Errorf("%d objects still remembered after their events came or they were deleted", len(w.objects))
	}
}
