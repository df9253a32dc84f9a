package proxyenv

import (
	"fmt"
	"regexp"
	"strings"
	"unicode"

	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract"
)

// MirrorImage rewrites image with the first ADC registry whose Source matches it, returning
// Mirror followed by the part of image after Source. No registries, or none matching, returns
// image unchanged.
//
// Matching is literal (no docker.io/library normalization) and only at a boundary. Source matches
// when image is exactly Source, or continues right after Source with:
//   - '/': a deeper path; "quay.io/ocm" matches "quay.io/ocm/proxy:v1" but not "quay.io/ocmx/a";
//   - ':' or '@' followed by no '/': a tag or digest of that exact repository; "quay.io/ocm"
//     matches "quay.io/ocm:v1", while "localhost" does not match "localhost:5000/ocm/a".
//
// Every entry is validated before any matching, even ones after the first match; the error is a
// *FieldError with Field "spec.registries[i].source" or "spec.registries[i].mirror" and Reason
// proxyv1alpha1.ReasonInvalidRegistryMirror. Source and Mirror must both be non-empty, have no scheme
// ("https://"), no whitespace, no trailing (or leading, or doubled) '/', and only the characters
// [a-z0-9._:/-]; a registry port such as "mirror.local:5000/ocm" is fine. (This is stricter than
// the OCM API, where an empty Source means "every registry" and an empty Mirror is ignored.)
//
// The rewritten image must still be a valid image reference
// ([host[:port]/]path[:tag][@digest]); otherwise the Mirror of the matching entry is reported.
func MirrorImage(image string, registries []addonv1alpha1.ImageMirror) (string, error) {
	for i, r := range registries {
		if err := validateRegistry(fmt.Sprintf("spec.registries[%d].source", i), proxyv1alpha1.ReasonInvalidRegistryMirror, "source", r.Source); err != nil {
			return "", err
		}
		if err := validateRegistry(fmt.Sprintf("spec.registries[%d].mirror", i), proxyv1alpha1.ReasonInvalidRegistryMirror, "mirror", r.Mirror); err != nil {
			return "", err
		}
	}
	for i, r := range registries {
		rest, ok := matchSource(image, r.Source)
		if !ok {
			continue
		}
		return mirrored(image, r.Mirror+rest, fmt.Sprintf("spec.registries[%d].mirror", i), proxyv1alpha1.ReasonInvalidRegistryMirror)
	}
	return image, nil
}

// matchSource returns what follows source in image when source matches at a boundary.
func matchSource(image, source string) (string, bool) {
	if source == "" || !strings.HasPrefix(image, source) {
		return "", false
	}
	rest := image[len(source):]
	switch {
	case rest == "", rest[0] == '/':
		return rest, true
	case (rest[0] == ':' || rest[0] == '@') && !strings.Contains(rest, "/"):
		return rest, true
	}
	return "", false
}

// mirrored returns out, image rewritten by the mirror of field, when it is still an image reference.
func mirrored(image, out, field, reason string) (string, error) {
	if !isImageReference(out) {
		return "", fieldError(field, reason, fmt.Sprintf("mirroring image %q gives %q, which is not a valid image reference; "+
			"the mirror must be a registry host[:port] optionally followed by /path, without a tag or digest", image, out))
	}
	return out, nil
}

// validateRegistry checks the source or mirror (what) v of an entry, reporting field with reason.
func validateRegistry(field, reason, what, v string) error {
	bad := func(format string, args ...any) error {
		return fieldError(field, reason, fmt.Sprintf(format, args...))
	}
	shown := contract.RedactProxyURL(v)
	switch {
	case v == "":
		return bad("the registry %s must not be empty; write a registry host[:port] optionally followed by /path, e.g. \"mirror.local:5000/ocm\"", what)
	case strings.Contains(v, "://"):
		return bad("registry %s %q must not have a scheme; write it without \"https://\", e.g. \"mirror.local:5000/ocm\"", what, shown)
	case strings.IndexFunc(v, unicode.IsSpace) >= 0:
		return bad("registry %s %q must not contain whitespace", what, shown)
	case strings.IndexFunc(v, unicode.IsUpper) >= 0:
		return bad("registry %s %q must be lowercase", what, shown)
	}
	if i := strings.IndexFunc(v, func(r rune) bool { return !isRegistryRune(r) }); i >= 0 {
		return bad("registry %s %q contains %q, which is not valid here; use only a-z 0-9 . _ : / -", what, shown, []rune(v[i:])[0])
	}
	switch {
	case strings.HasSuffix(v, "/"):
		return bad("registry %s %q must not end with '/'; write %q", what, v, strings.TrimRight(v, "/"))
	case strings.HasPrefix(v, "/"), strings.Contains(v, "//"):
		return bad("registry %s %q must not start with '/' or contain \"//\"; write a registry host[:port] optionally followed by /path", what, v)
	}
	return nil
}

func isRegistryRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || strings.ContainsRune("._:/-", r)
}

// imageReference follows the image reference grammar of the container ecosystem:
// [domain[:port]/]component(/component)*[:tag][@algorithm:hex].
var imageReference = func() *regexp.Regexp {
	const (
		domainComponent = `(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])`
		domain          = domainComponent + `(?:\.` + domainComponent + `)*(?::[0-9]+)?`
		pathComponent   = `[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*`
		tag             = `[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}`
		digest          = `[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[a-fA-F0-9]{32,}`
	)
	return regexp.MustCompile(`^(?:` + domain + `/)?` + pathComponent + `(?:/` + pathComponent + `)*` +
		`(?::` + tag + `)?(?:@` + digest + `)?$`)
}()

// isImageReference reports whether s is a syntactically valid image reference whose name part is
// at most 255 characters long.
func isImageReference(s string) bool {
	if !imageReference.MatchString(s) {
		return false
	}
	name := s
	if i := strings.IndexByte(name, '@'); i >= 0 {
		name = name[:i]
	}
	if i := strings.LastIndexByte(name, ':'); i >= 0 && !strings.Contains(name[i:], "/") {
		name = name[:i]
	}
	return len(name) <= 255
}
