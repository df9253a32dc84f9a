package clusterproxy

import (
	"bytes"
	"io"
	"net/http"
)

const (
	// resendAttempts bounds how often resendCut sends one request.
	resendAttempts = 3
	// resendBuffer bounds the answer resendCut holds to be able to send its request again: an answer longer than
	// this is passed on as it comes once this much of it arrived, and a cut after that reaches the caller.
	resendBuffer = 32 << 20
)

// resendCut sends a GET or HEAD again when its answer is cut before its end, as when the proxy-server or the agent
// carrying the tunnel dies between an answer's headers and its body: the transport (and client-go) try a request
// again only when no answer came at all. It reads each such answer whole before handing it on, up to resendBuffer;
// the requests that stream (watch, follow), upgrades and requests with a body pass through as they are.
type resendCut struct {
	next http.RoundTripper
	// limit is how much of an answer is held; 0 means resendBuffer.
	limit int64
}

func (t resendCut) RoundTrip(req *http.Request) (*http.Response, error) {
	if !resendable(req) {
		return t.next.RoundTrip(req)
	}
	for attempt := 1; ; attempt++ {
		resp, err := t.next.RoundTrip(req)
		if err != nil {
			return nil, err
		}
		limit := t.limit
		if limit == 0 {
			limit = resendBuffer
		}
		held, rest, err := readUpTo(resp.Body, limit)
		if err == nil {
			resp.Body = bodyOf(held, rest, resp.Body)
			return resp, nil
		}
		_ = resp.Body.Close()
		if attempt == resendAttempts || req.Context().Err() != nil {
			return nil, err
		}
	}
}

// resendable says whether req may be sent again and answers it whole: a GET or HEAD without a body that neither
// streams nor upgrades.
func resendable(req *http.Request) bool {
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		return false
	}
	if req.Body != nil && req.Body != http.NoBody {
		return false
	}
	if req.Header.Get("Upgrade") != "" {
		return false
	}
	q := req.URL.Query()
	return q.Get("watch") != "true" && q.Get("watch") != "1" && q.Get("follow") != "true"
}

// readUpTo reads body until its end or limit bytes: held is what it read, and rest is true when the body goes on.
func readUpTo(body io.Reader, limit int64) (held []byte, rest bool, err error) {
	var buf bytes.Buffer
	n, err := io.Copy(&buf, io.LimitReader(body, limit))
	if err != nil {
		return nil, false, err
	}
	return buf.Bytes(), n == limit, nil
}

// bodyOf is the body handed on: what was held, followed by the rest of the original body when there is more.
func bodyOf(held []byte, rest bool, original io.ReadCloser) io.ReadCloser {
	if !rest {
		_ = original.Close()
		return io.NopCloser(bytes.NewReader(held))
	}
	return struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(held), original), original}
}
