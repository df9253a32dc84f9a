package clusteragent

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

func version(uid, rv string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), ResourceVersion: rv}}
}

func TestOwnWritesLetThroughEveryChangeButThePassesOwn(t *testing.T) {
	var w ownWrites
	p := w.notOwn()
	passes := func(obj *corev1.ConfigMap) bool { return p.Update(event.UpdateEvent{ObjectOld: obj, ObjectNew: obj}) }

	// A pass creates an object (version 1) and then writes its status (version 2).
	w.wrote(version("a", "1"))
	w.wrote(version("a", "2"))
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
	if len(w.versions) != 0 {
		t.Errorf("%d objects still remembered after all their events came", len(w.versions))
	}

	// A pass keeps two versions per object; a third write pushes out the oldest.
	w.wrote(version("c", "1"))
	w.wrote(version("c", "2"))
	w.wrote(version("c", "3"))
	if !passes(version("c", "1")) {
		t.Error("a version older than the last two is still held back")
	}
	if !p.Delete(event.DeleteEvent{Object: version("c", "3")}) {
		t.Error("a deletion was held back")
	}
	if len(w.versions) != 0 {
		t.Error("a deleted object's versions are still remembered")
	}
	w.wrote(&corev1.ConfigMap{})
	if len(w.versions) != 0 {
		t.Error("an object without uid or version was remembered")
	}
}
