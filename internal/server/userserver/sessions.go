package userserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/streaming/pkg/httpstream"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/proxyhttp"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/server/hubidentity"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/server/sessionrec"
)

// recordedSession is a session whose recording was opened before its request went to the cluster; the cluster's 101
// answer lets the recording tap the stream (ModifyResponse), any other answer discards it.
type recordedSession struct {
	session *sessionrec.Session
	wrapped bool
}

type sessionKey struct{}

// errUnrecordable is the answer to a session whose stream the recorder cannot read, when the policy refuses
// unrecorded sessions.
var errUnrecordable = errors.New("the cluster answered with a stream protocol the session recorder cannot read")

// startRecording opens the recording of r when it is an exec or attach and sessions are recorded, before anything
// reaches the cluster. ok is false when the request was answered here: the recording could not be opened and the
// policy refuses sessions it cannot record.
func (s *Server) startRecording(w http.ResponseWriter, r *http.Request, req request, hubUser *hubidentity.Identity) (context.Context, bool) {
	ctx := r.Context()
	if s.opts.Sessions == nil || !httpstream.IsUpgradeRequest(r) {
		return ctx, true
	}
	m, ok := sessionrec.Target(req.target.Path, r.URL.Query())
	if !ok {
		return ctx, true
	}
	m.SessionID, m.Cluster, m.Via, m.Replica = req.auditID, req.target.Cluster, req.via, s.opts.Replica
	if hubUser != nil {
		m.User, m.Groups = hubUser.User, hubUser.Groups
	}
	session, err := s.opts.Sessions.Start(m)
	if err != nil {
		w.Header().Set("Retry-After", "1")
		proxyhttp.WriteStatus(w, http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable,
			fmt.Sprintf("this session cannot be recorded, and sessions that cannot be recorded are refused: %v", err))
		return ctx, false
	}
	// A compressed websocket is one the recorder cannot read: the cluster is not offered it.
	r.Header.Del("Sec-Websocket-Extensions")
	return context.WithValue(ctx, sessionKey{}, &recordedSession{session: session}), true
}

// endRecording discards the recording of a session the cluster did not let start.
func endRecording(ctx context.Context) {
	if rs, ok := ctx.Value(sessionKey{}).(*recordedSession); ok && !rs.wrapped {
		rs.session.Discard()
	}
}

// modifyResponse lets the recording of a session tap its stream once the cluster switched protocols.
func (s *Server) modifyResponse(res *http.Response) error {
	rs, ok := res.Request.Context().Value(sessionKey{}).(*recordedSession)
	if !ok || res.StatusCode != http.StatusSwitchingProtocols {
		return nil
	}
	p, known := sessionrec.ProtocolOf(res)
	backend, isConn := res.Body.(io.ReadWriteCloser)
	if !isConn {
		return errUnrecordable // ReverseProxy could not carry it either
	}
	if !known {
		if s.opts.Sessions.FailsClosed() {
			return errUnrecordable
		}
		klog.FromContext(res.Request.Context()).Info("A session goes on unrecorded: its stream protocol is not one the recorder reads",
			"session", rs.session.ID(), "upgrade", res.Header.Get("Upgrade"))
	}
	// An unknown protocol is recorded as a session that could not be, marked and counted.
	res.Body = rs.session.Wrap(backend, p)
	rs.wrapped = true
	return nil
}
