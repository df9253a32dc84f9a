package proxyenv

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode"

	corev1 "k8s.io/api/core/v1"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
)

// Resources returns the resource requirements for one container from ADC resourceRequirements,
// or nil when no entry matches.
//
// containerID has the form "<resource>:<name>:<container>" (e.g.
// "deployments:cluster-proxy-proxy-agent:proxy-agent"); each part is compared literally or is
// "*", which matches anything (no partial globs). The LAST matching entry wins, as a whole (its
// requests and limits are not merged with earlier matches), so specific entries can follow
// wildcard ones. The result is a deep copy.
//
// Every entry is validated, matching or not, in order; the error is a *FieldError with Reason
// proxyv1alpha1.ReasonInvalidResourceRequirements and Field:
//   - "spec.resourceRequirements[i].containerID" when containerID does not have exactly three
//     non-empty parts, or a part contains whitespace;
//   - "spec.resourceRequirements[i].resources" when a quantity is negative or a request is greater
//     than the limit for the same resource.
func Resources(reqs []addonv1alpha1.ContainerResourceRequirements, resource, name, container string) (*corev1.ResourceRequirements, error) {
	var found *corev1.ResourceRequirements
	want := [3]string{resource, name, container}
	for i, r := range reqs {
		parts, err := parseContainerID(i, r.ContainerID)
		if err != nil {
			return nil, err
		}
		if err := validateRequirements(i, r.Resources); err != nil {
			return nil, err
		}
		if matchPart(parts[0], want[0]) && matchPart(parts[1], want[1]) && matchPart(parts[2], want[2]) {
			found = r.Resources.DeepCopy()
		}
	}
	return found, nil
}

func matchPart(pattern, v string) bool {
	return pattern == "*" || pattern == v
}

func parseContainerID(i int, id string) ([3]string, error) {
	parts := strings.Split(id, ":")
	ok := len(parts) == 3
	for _, p := range parts {
		if p == "" || strings.IndexFunc(p, unicode.IsSpace) >= 0 {
			ok = false
		}
	}
	if !ok {
		return [3]string{}, fieldError(fmt.Sprintf("spec.resourceRequirements[%d].containerID", i), proxyv1alpha1.ReasonInvalidResourceRequirements,
			fmt.Sprintf("containerID %q must have the form <resource>:<name>:<container>, three non-empty parts without whitespace, "+
				"each of which may be \"*\"; e.g. \"deployments:cluster-proxy-proxy-agent:proxy-agent\"", id))
	}
	return [3]string{parts[0], parts[1], parts[2]}, nil
}

func validateRequirements(i int, rr corev1.ResourceRequirements) error {
	bad := func(format string, args ...any) error {
		return fieldError(fmt.Sprintf("spec.resourceRequirements[%d].resources", i), proxyv1alpha1.ReasonInvalidResourceRequirements, fmt.Sprintf(format, args...))
	}
	for _, n := range sortedNames(rr.Limits) {
		if q := rr.Limits[n]; q.Sign() < 0 {
			return bad("limits.%s is negative (%s); quantities must be zero or more", n, q.String())
		}
	}
	for _, n := range sortedNames(rr.Requests) {
		req := rr.Requests[n]
		if req.Sign() < 0 {
			return bad("requests.%s is negative (%s); quantities must be zero or more", n, req.String())
		}
		if limit, ok := rr.Limits[n]; ok && req.Cmp(limit) > 0 {
			return bad("requests.%s (%s) is greater than limits.%s (%s); lower the request or raise the limit", n, req.String(), n, limit.String())
		}
	}
	return nil
}

func sortedNames(l corev1.ResourceList) []corev1.ResourceName {
	return slices.Sorted(maps.Keys(l))
}
