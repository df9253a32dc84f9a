package testenv

import (
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
)

// Requests counts the API requests of a client whose rest.Config.WrapTransport is Wrap: writes (every method but GET
// and HEAD) apart from reads (GET, which LIST and WATCH are too), the writes to each resource, and the LISTs and
// WATCHes of each resource by what they asked for (whole objects, or their metadata only), and the requests the API
// server refused for want of a right (403).
type Requests struct {
	writes, reads atomic.Int64
	mu            sync.Mutex
	byResource    map[string]int64
	byAPI         map[string]int64
	lastByAPI     map[string]string
	collections   map[string]CollectionReads
	forbidden     []string
}

// CollectionReads are the LISTs and WATCHes of one resource: of whole objects, and of PartialObjectMetadata (what a
// controller-runtime metadata-only watch asks for).
type CollectionReads struct {
	Whole, Metadata int64
}

// Wrap is a rest.Config.WrapTransport that counts the requests rt carries.
func (r *Requests) Wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		path := parsePath(req.URL.Path)
		if api := path.groupVersion; api != "" {
			r.mu.Lock()
			if r.byAPI == nil {
				r.byAPI, r.lastByAPI = map[string]int64{}, map[string]string{}
			}
			r.byAPI[api]++
			r.lastByAPI[api] = req.Method + " " + req.URL.Path
			r.mu.Unlock()
		}
		if req.Method == http.MethodGet || req.Method == http.MethodHead {
			r.reads.Add(1)
			if resource := path.resource; path.collection && resource != "" {
				r.mu.Lock()
				if r.collections == nil {
					r.collections = map[string]CollectionReads{}
				}
				c := r.collections[resource]
				if strings.Contains(req.Header.Get("Accept"), "as=PartialObjectMetadata") {
					c.Metadata++
				} else {
					c.Whole++
				}
				r.collections[resource] = c
				r.mu.Unlock()
			}
		} else {
			r.writes.Add(1)
			r.mu.Lock()
			if r.byResource == nil {
				r.byResource = map[string]int64{}
			}
			r.byResource[path.resource]++
			r.mu.Unlock()
		}
		resp, err := rt.RoundTrip(req)
		if err == nil && resp.StatusCode == http.StatusForbidden {
			r.mu.Lock()
			r.forbidden = append(r.forbidden, req.Method+" "+req.URL.Path)
			r.mu.Unlock()
		}
		return resp, err
	})
}

// Forbidden are the requests (method and path) the API server answered 403, in order.
func (r *Requests) Forbidden() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.forbidden...)
}

// Writes is the number of writes so far.
func (r *Requests) Writes() int64 { return r.writes.Load() }

// Reads is the number of reads so far.
func (r *Requests) Reads() int64 { return r.reads.Load() }

// WritesTo is the number of writes so far to resource (a plural such as "clustermanagementaddons"), subresources
// included.
func (r *Requests) WritesTo(resource string) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byResource[resource]
}

// To is the number of requests so far, of any method, to the resources of groupVersion
// ("addon.open-cluster-management.io/v1beta1"; "v1" for the core API); discovery is not counted.
func (r *Requests) To(groupVersion string) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byAPI[groupVersion]
}

// LastTo is the last request to the resources of groupVersion ("GET /apis/..."), for a failure's message.
func (r *Requests) LastTo(groupVersion string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastByAPI[groupVersion]
}

// CollectionReadsOf are the LISTs and WATCHes of resource so far.
func (r *Requests) CollectionReadsOf(resource string) CollectionReads {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.collections[resource]
}

// apiPath is what the path of an API request names.
type apiPath struct {
	// groupVersion is "v1" for the core API, else "<group>/<version>"; resource is a plural ("namespaces" for a
	// namespace itself). Both are "" for discovery's paths and any path that is not the API's.
	groupVersion, resource string
	// collection is whether the path names a collection (what LIST and WATCH read) rather than one object.
	collection bool
}

// parsePath reads /api/v1/[namespaces/<ns>/]<resource>[/<name>[/<subresource>]] and its /apis/<group>/<version>/
// form.
func parsePath(path string) apiPath {
	segs := strings.Split(strings.Trim(path, "/"), "/")
	var p apiPath
	i := 0
	switch {
	case len(segs) >= 2 && segs[0] == "api":
		p.groupVersion, i = segs[1], 2
	case len(segs) >= 3 && segs[0] == "apis":
		p.groupVersion, i = segs[1]+"/"+segs[2], 3
	default:
		return apiPath{}
	}
	if len(segs) > i+2 && segs[i] == "namespaces" {
		i += 2
	}
	if i >= len(segs) {
		return apiPath{}
	}
	p.resource, p.collection = segs[i], len(segs) == i+1
	return p
}

// Settled returns a condition for Eventually, polled at the quiet period you want: true once count has not changed
// since the previous poll.
func Settled(count func() int64) func() bool {
	last := int64(-1)
	return func() bool {
		n := count()
		settled := n == last
		last = n
		return settled
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
