// Package intern shares the strings that repeat across the objects of the manager's cache. Each decoded object holds
// its own copy of every string: on a hub of 10,000 clusters, 10,000 copies of the same condition types, reasons and
// messages, owner kinds and label keys, a third of the cache. A cache transform that swaps each string for the
// pool's copy keeps one.
package intern

import (
	"reflect"
	"sync"
)

// DefaultSize is how many strings a pool remembers before it begins to forget the ones it has not seen since.
const DefaultSize = 4096

// Pool is a bounded set of strings. It keeps two generations: a string seen while the older generation still holds
// it moves to the current one, and when the current one is full the older is dropped. Strings that repeat (on every
// cluster, in every event) stay; one seen once (a uid, a resourceVersion) is forgotten. A forgotten string stays
// shared by the objects that already hold it.
type Pool struct {
	mu                sync.Mutex
	current, previous map[string]string
	size              int
}

// NewPool returns a pool that remembers up to size strings per generation.
func NewPool(size int) *Pool {
	return &Pool{current: make(map[string]string, size), size: size}
}

// String returns the pool's copy of s, which holds the same bytes.
func (p *Pool) String(s string) string {
	if s == "" {
		return s
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if shared, ok := p.current[s]; ok {
		return shared
	}
	if shared, ok := p.previous[s]; ok {
		s = shared
	}
	if len(p.current) >= p.size {
		p.previous, p.current = p.current, make(map[string]string, p.size)
	}
	p.current[s] = s
	return s
}

// Transform is a cache transform: it shares the strings of obj, after next (nil for none).
func (p *Pool) Transform(next func(any) (any, error)) func(any) (any, error) {
	return func(obj any) (any, error) {
		if next != nil {
			var err error
			if obj, err = next(obj); err != nil {
				return nil, err
			}
		}
		p.Object(obj)
		return obj, nil
	}
}

// Object swaps every string obj reaches through pointers, for the pool's copy: exported string fields, the strings of
// slices, and the keys and values of string maps (which are rebuilt). Bytes are left alone, as is anything only an
// interface or an unexported field reaches.
func (p *Pool) Object(obj any) {
	p.value(reflect.ValueOf(obj))
}

func (p *Pool) value(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			p.value(v.Elem())
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if f := v.Field(i); f.CanSet() {
				p.value(f)
			}
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return
		}
		for i := range v.Len() {
			p.value(v.Index(i))
		}
	case reflect.Map:
		p.stringMap(v)
	case reflect.String:
		if v.CanSet() {
			v.SetString(p.String(v.String()))
		}
	}
}

// stringMap replaces a settable map of strings to strings by one of the pool's strings.
func (p *Pool) stringMap(v reflect.Value) {
	t := v.Type()
	if v.IsNil() || !v.CanSet() || t.Key().Kind() != reflect.String || t.Elem().Kind() != reflect.String {
		return
	}
	shared := reflect.MakeMapWithSize(t, v.Len())
	for it := v.MapRange(); it.Next(); {
		k, e := reflect.New(t.Key()).Elem(), reflect.New(t.Elem()).Elem()
		k.SetString(p.String(it.Key().String()))
		e.SetString(p.String(it.Value().String()))
		shared.SetMapIndex(k, e)
	}
	v.Set(shared)
}
