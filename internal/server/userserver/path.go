package userserver

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Target is where a user-server request goes: a cluster's kube-apiserver (Service nil) or one of its services.
type Target struct {
	Cluster string
	Service *ServiceRef
	// Path is the decoded path forwarded to the service-proxy; it starts with "/" and has no empty (except a
	// trailing one), "." or ".." segments.
	Path string
}

// ServiceRef names a service of the managed cluster.
type ServiceRef struct {
	Namespace, Name, Proto string
	Port                   int
}

// The service form is /<cluster>/api/v1/namespaces/<ns>/services/<[proto:]name[:port]>/proxy-service/<path>; these
// are the segments after the cluster.
const (
	segNamespace  = 3
	segService    = 5
	segMarker     = 6
	serviceSegs   = 7
	proxyService  = "proxy-service"
	maxEchoLength = 64
)

// ParsePath reads a request path as it arrived, still percent-encoded (url.URL.EscapedPath): /<cluster>/<path>. It
// refuses anything a backend could resolve differently from us: encoded slashes and backslashes, dot segments (also
// encoded), empty segments and control characters.
func ParsePath(p string) (Target, error) {
	if !strings.HasPrefix(p, "/") {
		return Target{}, errors.New("the path must start with /<cluster>")
	}
	segs, err := segments(p)
	if err != nil {
		return Target{}, err
	}
	return target(segs[0], segs[1:])
}

// ParseClusterPath reads the path of a request for cluster that named the cluster elsewhere (the aggregated API's
// clusters/<cluster>/proxy/<path>): escaped is the <path>, still percent-encoded, with its leading slash. It refuses
// what ParsePath refuses.
func ParseClusterPath(cluster, escaped string) (Target, error) {
	if !strings.HasPrefix(escaped, "/") {
		return Target{}, errors.New("the path must start with /")
	}
	segs, err := segments(escaped)
	if err != nil {
		return Target{}, err
	}
	return target(cluster, segs)
}

// segments are the decoded segments of escaped after its leading slash.
func segments(escaped string) ([]string, error) {
	lower := strings.ToLower(escaped)
	if strings.Contains(escaped, `\`) || strings.Contains(lower, "%2f") || strings.Contains(lower, "%5c") {
		return nil, errors.New("the path must not contain backslashes or encoded slashes")
	}
	segs := strings.Split(escaped[1:], "/")
	for i, raw := range segs {
		seg, err := url.PathUnescape(raw)
		if err != nil {
			return nil, fmt.Errorf("the path has an invalid escape in segment %q", echo(raw))
		}
		switch {
		case seg == "" && i != len(segs)-1:
			return nil, errors.New("the path must not contain empty segments")
		case seg == "." || seg == "..":
			return nil, errors.New(`the path must not contain "." or ".." segments`)
		case strings.ContainsFunc(seg, isControl):
			return nil, errors.New("the path must not contain control characters")
		}
		segs[i] = seg
	}
	return segs, nil
}

// target is where the decoded segments rest of a request for cluster go.
func target(cluster string, rest []string) (Target, error) {
	t := Target{Cluster: cluster}
	if t.Cluster == "" {
		return Target{}, errors.New("the path must start with /<cluster>")
	}
	if errs := validation.IsDNS1123Subdomain(t.Cluster); len(errs) > 0 {
		return Target{}, fmt.Errorf("invalid cluster name %q: %s", echo(t.Cluster), strings.Join(errs, "; "))
	}
	if isServicePath(rest) {
		svc, err := parseService(rest[segNamespace], rest[segService])
		if err != nil {
			return Target{}, err
		}
		t.Service = &svc
		rest = rest[serviceSegs:]
	}
	t.Path = "/" + strings.Join(rest, "/")
	return t, nil
}

func isServicePath(s []string) bool {
	return len(s) >= serviceSegs && s[0] == "api" && s[1] == "v1" && s[2] == "namespaces" && s[4] == "services" &&
		s[segMarker] == proxyService
}

// parseService reads "[proto:]name[:port]". Two parts are proto:name when the first is a protocol and the second is
// not a number, name:port otherwise. The proto defaults to https; the port defaults to the proto's well-known port,
// 443 for https and 80 for http.
func parseService(namespace, spec string) (ServiceRef, error) {
	s := ServiceRef{Namespace: namespace, Proto: "https"}
	if errs := validation.IsDNS1123Label(namespace); len(errs) > 0 {
		return ServiceRef{}, fmt.Errorf("invalid namespace %q: %s", echo(namespace), strings.Join(errs, "; "))
	}
	parts := strings.Split(spec, ":")
	var port string
	switch {
	case len(parts) == 1:
		s.Name = parts[0]
	case len(parts) == 2 && isProto(parts[0]) && !isDigits(parts[1]):
		s.Proto, s.Name = parts[0], parts[1]
	case len(parts) == 2:
		s.Name, port = parts[0], parts[1]
	case len(parts) == 3:
		s.Proto, s.Name, port = parts[0], parts[1], parts[2]
	default:
		return ServiceRef{}, fmt.Errorf("invalid service %q: want [proto:]name[:port]", echo(spec))
	}
	if !isProto(s.Proto) {
		return ServiceRef{}, fmt.Errorf("invalid service %q: the protocol must be http or https", echo(spec))
	}
	if errs := validation.IsDNS1035Label(s.Name); len(errs) > 0 {
		return ServiceRef{}, fmt.Errorf("invalid service name %q: %s", echo(s.Name), strings.Join(errs, "; "))
	}
	switch {
	case port != "":
		n, err := strconv.Atoi(port)
		if !isDigits(port) || err != nil || n < 1 || n > 65535 {
			return ServiceRef{}, fmt.Errorf("invalid service %q: the port must be a number from 1 to 65535", echo(spec))
		}
		s.Port = n
	case s.Proto == "http":
		s.Port = 80
	default:
		s.Port = 443
	}
	return s, nil
}

func isProto(s string) bool { return s == "http" || s == "https" }

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// echo shortens user input quoted back in an error message.
func echo(s string) string {
	if len(s) > maxEchoLength {
		return s[:maxEchoLength] + "..."
	}
	return s
}
