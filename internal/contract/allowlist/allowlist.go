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
	// TokenOptional lets a request without a bearer token through to the service, which authenticates its callers
	// itself (the existing add-on serves every allowed service so); the user-server otherwise answers it 401.
	TokenOptional bool
}

// tokenOptional is the option of String and Parse that sets TokenOptional.
const tokenOptional = ",token=optional"

func (s Service) String() string {
	out := s.Namespace + "/" + s.Name
	if s.Port != 0 {
		out += ":" + strconv.Itoa(s.Port)
	}
	if s.TokenOptional {
		out += tokenOptional
	}
	return out
}

// Parse reads "namespace/name" or "namespace/name:port", optionally followed by ",token=optional".
func Parse(v string) (Service, error) {
	entry, option, hasOption := strings.Cut(v, ",")
	if hasOption && ","+option != tokenOptional {
		return Service{}, fmt.Errorf("allowed service %q: unknown option %q; the only one is token=optional", v, option)
	}
	s, err := parseService(v, entry)
	s.TokenOptional = hasOption
	return s, err
}

func parseService(v, entry string) (Service, error) {
	ns, rest, ok := strings.Cut(entry, "/")
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
		if s.matches(namespace, name, port) {
			return true
		}
	}
	return false
}

// AllowsWithoutToken reports whether an entry that lists the service namespace/name on port lets requests without a
// bearer token through.
func (l List) AllowsWithoutToken(namespace, name string, port int) bool {
	for _, s := range l {
		if s.TokenOptional && s.matches(namespace, name, port) {
			return true
		}
	}
	return false
}

func (s Service) matches(namespace, name string, port int) bool {
	return s.Namespace == namespace && s.Name == name && (s.Port == 0 || s.Port == port)
}
