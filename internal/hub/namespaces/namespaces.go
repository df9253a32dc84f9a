// Package namespaces is the set of hub namespaces the manager writes in: the proxy-servers' (their Deployments,
// Services, Secrets, RBAC) and those ProxyCertificates may be issued into. The manager's namespaced rights are Roles
// in exactly these namespaces, its cache watches only these, and a configuration or certificate that names another
// namespace is refused with a condition rather than failing on a forbidden request.
package namespaces

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/cache"
)

// Wildcard is the flag value for every namespace: it needs the manager's namespaced rules granted cluster-wide.
const Wildcard = "*"

// Set is a set of namespaces, or every namespace. The zero Set is every namespace.
type Set struct {
	names []string // sorted, unique; nil is every namespace
}

// All is every namespace.
func All() Set { return Set{} }

// Of is the set of names (every namespace when names is empty).
func Of(names ...string) Set {
	if len(names) == 0 {
		return All()
	}
	s := slices.Clone(names)
	slices.Sort(s)
	return Set{names: slices.Compact(s)}
}

// Parse reads a flag's value: Wildcard, or namespace names separated by commas. flag names the flag in errors.
func Parse(flag, value string) (Set, error) {
	value = strings.TrimSpace(value)
	if value == Wildcard {
		return All(), nil
	}
	var names []string
	for _, n := range strings.Split(value, ",") {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		if errs := validation.IsDNS1123Label(n); len(errs) > 0 {
			return Set{}, fmt.Errorf("--%s: %q is not a namespace name: %s", flag, n, strings.Join(errs, "; "))
		}
		names = append(names, n)
	}
	if len(names) == 0 {
		return Set{}, fmt.Errorf("--%s is empty: name at least one namespace, or %q for every namespace", flag, Wildcard)
	}
	return Of(names...), nil
}

// IsAll says whether s is every namespace.
func (s Set) IsAll() bool { return s.names == nil }

// Has says whether namespace is in s.
func (s Set) Has(namespace string) bool {
	_, found := slices.BinarySearch(s.names, namespace)
	return s.IsAll() || found
}

// Union is every namespace of s or o.
func (s Set) Union(o Set) Set {
	if s.IsAll() || o.IsAll() {
		return All()
	}
	return Of(append(slices.Clone(s.names), o.names...)...)
}

// String is the flag form of s.
func (s Set) String() string {
	if s.IsAll() {
		return Wildcard
	}
	return strings.Join(s.names, ",")
}

// Cache is the cache's namespaces for an object kept in s: nil (every namespace) when s is every namespace.
func (s Set) Cache() map[string]cache.Config {
	if s.IsAll() {
		return nil
	}
	out := make(map[string]cache.Config, len(s.names))
	for _, n := range s.names {
		out[n] = cache.Config{}
	}
	return out
}
