package serviceproxy

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/proxyhttp"
)

// serviceTarget is a service request's destination.
type serviceTarget struct {
	proto     string
	namespace string
	name      string
	port      int
}

// parseServiceTarget reads the Cluster-Proxy-* headers: namespace, service and port are required, proto is http or
// https (default https).
func parseServiceTarget(h http.Header) (serviceTarget, error) {
	var t serviceTarget
	var err error
	if t.namespace, err = singleHeader(h, proxyhttp.HeaderNamespace, true); err != nil {
		return t, err
	}
	if errs := validation.IsDNS1123Label(t.namespace); len(errs) > 0 {
		return t, fmt.Errorf("header %s %q is not a namespace name: %s", proxyhttp.HeaderNamespace, t.namespace, strings.Join(errs, "; "))
	}
	if t.name, err = singleHeader(h, proxyhttp.HeaderService, true); err != nil {
		return t, err
	}
	if errs := validation.IsDNS1035Label(t.name); len(errs) > 0 {
		return t, fmt.Errorf("header %s %q is not a service name: %s", proxyhttp.HeaderService, t.name, strings.Join(errs, "; "))
	}
	port, err := singleHeader(h, proxyhttp.HeaderPort, true)
	if err != nil {
		return t, err
	}
	if t.port, err = strconv.Atoi(port); err != nil || t.port < 1 || t.port > 65535 || strconv.Itoa(t.port) != port {
		return t, fmt.Errorf("header %s %q is not a port number from 1 to 65535", proxyhttp.HeaderPort, port)
	}
	if t.proto, err = singleHeader(h, proxyhttp.HeaderProto, false); err != nil {
		return t, err
	}
	switch t.proto {
	case "":
		t.proto = "https"
	case "http", "https":
	default:
		return t, fmt.Errorf("header %s %q must be http or https", proxyhttp.HeaderProto, t.proto)
	}
	return t, nil
}

// url is the service's address: <proto>://<name>.<namespace>.<domain>:<port>.
func (t serviceTarget) url(domain string) *url.URL {
	return &url.URL{Scheme: t.proto, Host: net.JoinHostPort(t.name+"."+t.namespace+"."+domain, strconv.Itoa(t.port))}
}

// singleHeader returns the one value of header name (matched ignoring case); several values are an error, and so is
// none when required.
func singleHeader(h http.Header, name string, required bool) (string, error) {
	var values []string
	for k, v := range h {
		if strings.EqualFold(k, name) {
			values = append(values, v...)
		}
	}
	switch {
	case len(values) > 1:
		return "", fmt.Errorf("header %s is given more than once", name)
	case len(values) == 0 || values[0] == "":
		if required {
			return "", fmt.Errorf("header %s is required", name)
		}
		return "", nil
	}
	return strings.TrimSpace(values[0]), nil
}
