// Package allowlist is the list of managed-cluster services the user-server and the service-proxy may reach. Nothing
// is reachable unless listed; the kube-apiserver is not subject to the list.
package allowlist

import (
	"fmt"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Service is one allowed service; Port 0 allows every port.
type Service struct {
	Namespace string
	Name      string
	Port      int
}

func (s Service) String() string {
	if s.Port == 0 {
		return s.Namespace + "/" + s.Name
	}
	return s.Namespace + "/" + s.Name + ":" + strconv.Itoa(s.Port)
}

// Parse reads "namespace/name" or "namespace/name:port".
func Parse(v string) (Service, error) {
	ns, rest, ok := strings.Cut(v, "/")
	if !ok {
		return Service{}, fmt.Errorf("allowed service %q: want namespace/name[:port]", v)
	}
	name, port, hasPort := strings.Cut(rest, ":")
	s := Service{Namespace: ns, Name: name}
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		return Service{}, fmt.Errorf("allowed service %q: namespace: %s", v, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1035Label(name); len(errs) > 0 {
		return Service{}, fmt.Errorf("allowed service %q: name: %s", v, strings.Join(errs, "; "))
	}
	if hasPort {
		p, err := strconv.Atoi(port)
		if err != nil || p < 1 || p > 65535 {
			return Service{}, fmt.Errorf("allowed service %q: port must be a number from 1 to 65535", v)
		}
		s.Port = p
	}
	return s, nil
}

// List is a set of allowed services.
type List []Service

// ParseAll parses each entry; the first bad one is the error.
func ParseAll(values []string) (List, error) {
	l := make(List, 0, len(values))
	for _, v := range values {
		s, err := Parse(v)
		if err != nil {
			return nil, err
		}
		l = append(l, s)
	}
	return l, nil
}

// Allows reports whether the service namespace/name on port is listed.
func (l List) Allows(namespace, name string, port int) bool {
	for _, s := range l {
		if s.Namespace == namespace && s.Name == name && (s.Port == 0 || s.Port == port) {
			return true
		}
	}
	return false
}
