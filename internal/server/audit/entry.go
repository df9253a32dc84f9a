package audit

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/server/hubidentity"
)

// MaxRequestBody is the longest request body an event keeps (Entry.RequestBody).
const MaxRequestBody = 64 << 10

// The annotations of every event.
const (
	AnnotationPrefix = "cluster-proxy.open-cluster-management.io/"
	// AnnotationCluster is the managed cluster the request went to.
	AnnotationCluster = AnnotationPrefix + "cluster"
	// AnnotationVia is the way in: "user-server" or "aggregated".
	AnnotationVia = AnnotationPrefix + "via"
	// AnnotationReplica is the proxy-server replica that served the request.
	AnnotationReplica = AnnotationPrefix + "replica"
	// AnnotationIdentity is who vouched for the caller: IdentityHub, IdentityClusterToken or IdentityNone.
	AnnotationIdentity = AnnotationPrefix + "identity"
	// AnnotationResponseBytes is how many bytes of the answer's body reached the caller (ResponseComplete).
	AnnotationResponseBytes = AnnotationPrefix + "response-bytes"
	// AnnotationDuration is the seconds from the request's arrival to the end of its answer (ResponseComplete).
	AnnotationDuration = AnnotationPrefix + "duration"
	// AnnotationRequestBody says why a body the policy asked for is not in the event.
	AnnotationRequestBody = AnnotationPrefix + "request-body"
)

// The values of AnnotationIdentity.
const (
	// IdentityHub: the hub authenticated the user the event names.
	IdentityHub = "hub"
	// IdentityClusterToken: a bearer token the hub did not know (or did not review) went to the managed cluster,
	// which authenticates it; the event names no user.
	IdentityClusterToken = "cluster-token"
	// IdentityNone: the request carried no credential.
	IdentityNone = "none"
)

// Request is what Begin needs of a request to a managed cluster.
type Request struct {
	// AuditID names the event: on the aggregated path, the Audit-ID the hub kube-apiserver gave the request, so that
	// the event joins the hub's own. "" (or a value that is not printable ASCII of at most 128 characters) takes a
	// new UUID.
	AuditID string
	// Via is the way in: "user-server" or "aggregated".
	Via string
	// Cluster is the managed cluster's name.
	Cluster string
	// User is the hub user, as the hub authenticated them; nil when no hub user is known: the request's token went
	// to the cluster unreviewed by the hub (or the hub did not know it), or it carried none.
	User *hubidentity.Identity
	// Method, EscapedPath and RawQuery are those of the request to the managed kube-apiserver (for the aggregated
	// API, what follows proxy/).
	Method, EscapedPath, RawQuery string
	// Header is read for User-Agent, for whether the request upgrades, and for whether it carries a bearer token;
	// nothing else of it, and no value but User-Agent, goes into an event.
	Header http.Header
	// SourceIPs are the caller's addresses, the farthest first (X-Forwarded-For, then the peer).
	SourceIPs []string
	// Received is when the request arrived; zero is now.
	Received time.Time
}

// Entry is the audit of one request, from Begin to Complete. A nil *Entry (a nil Auditor's) records nothing. Its
// methods are meant for the request's goroutine, one at a time.
type Entry struct {
	a           *Auditor
	id          string
	level       auditinternal.Level
	omitStages  []auditinternal.Stage
	ev          auditinternal.Event // the fields every stage has
	longRunning bool
	body        *runtime.Unknown
	bodyNote    string
	// strictErr is set when the RequestReceived event did not reach a blocking-strict sink; strictChecked when it did.
	strictErr     error
	strictChecked bool
	started       bool
	completed     bool
}

// SinkDownError is Admit's refusal: a blocking-strict sink cannot record events.
type SinkDownError struct {
	// Sink is "log" or "webhook".
	Sink string
}

func (e *SinkDownError) Error() string {
	return fmt.Sprintf("the audit %s sink cannot record events", e.Sink)
}

// Begin evaluates the policy for r, before it is served, so that the caller knows whether to keep its body
// (Level), and records stage RequestReceived unless the policy omits it (the default policy does). Call Complete
// once the answer ended, whatever it was.
func (a *Auditor) Begin(r Request) *Entry {
	if a == nil {
		return nil
	}
	received := r.Received
	if received.IsZero() {
		received = a.clock.Now()
	}
	id := r.AuditID
	if !validAuditID(id) {
		id = string(uuid.NewUUID())
	}
	query := sanitizeQuery(r.RawQuery)
	upgrade := isUpgrade(r.Header)
	info := parseRequest(r.Method, r.EscapedPath, query, upgrade)

	attrs := authorizer.AttributesRecord{
		Verb:            info.Verb,
		Namespace:       info.Namespace,
		APIGroup:        info.APIGroup,
		APIVersion:      info.APIVersion,
		Resource:        info.Resource,
		Subresource:     info.Subresource,
		Name:            info.Name,
		ResourceRequest: info.IsResourceRequest,
		Path:            info.Path,
	}
	identity := IdentityNone
	var userInfo authnv1.UserInfo
	if u := r.User; u != nil {
		identity = IdentityHub
		attrs.User = &user.DefaultInfo{Name: u.User, UID: u.UID, Groups: u.Groups, Extra: u.Extra}
		userInfo = authnv1.UserInfo{Username: u.User, UID: u.UID, Groups: slices.Clone(u.Groups)}
		if len(u.Extra) > 0 {
			userInfo.Extra = make(map[string]authnv1.ExtraValue, len(u.Extra))
			for k, v := range u.Extra {
				userInfo.Extra[k] = slices.Clone(v)
			}
		}
	} else if hasBearerCredential(r.Header) {
		identity = IdentityClusterToken
	}
	config := a.policy.EvaluatePolicyRule(attrs)
	e := &Entry{a: a, id: id, level: config.Level}
	if config.Level.Less(auditinternal.LevelMetadata) {
		return e
	}
	e.omitStages = config.OmitStages
	e.longRunning = longRunning(info, upgrade)
	e.ev = auditinternal.Event{
		Level:                    config.Level,
		AuditID:                  types.UID(id),
		RequestURI:               requestURI(r.EscapedPath, query),
		Verb:                     info.Verb,
		User:                     userInfo,
		SourceIPs:                slices.Clone(r.SourceIPs),
		UserAgent:                userAgent(r.Header),
		RequestReceivedTimestamp: metav1.NewMicroTime(received),
		Annotations: map[string]string{
			AnnotationCluster:  r.Cluster,
			AnnotationVia:      r.Via,
			AnnotationReplica:  a.replica,
			AnnotationIdentity: identity,
		},
	}
	if info.IsResourceRequest {
		e.ev.ObjectRef = &auditinternal.ObjectReference{
			Namespace:   info.Namespace,
			Name:        info.Name,
			Resource:    info.Resource,
			Subresource: info.Subresource,
			APIGroup:    info.APIGroup,
			APIVersion:  info.APIVersion,
		}
	}
	if !e.omits(auditinternal.StageRequestReceived) {
		failed := a.process(e.event(auditinternal.StageRequestReceived, received))
		if failed != nil {
			e.strictErr = &SinkDownError{Sink: failed.name}
		}
		e.strictChecked = true
	}
	return e
}

// Level is the level the policy gave the request: the caller keeps its body for RequestBody only at
// LevelRequest and above. LevelNone for a nil Entry.
func (e *Entry) Level() auditinternal.Level {
	if e == nil {
		return auditinternal.LevelNone
	}
	return e.level
}

// ID is the request's audit ID, to answer as the Audit-ID header; "" for a nil Entry.
func (e *Entry) ID() string {
	if e == nil {
		return ""
	}
	return e.id
}

// Admit says whether the request may be served: an error, a *SinkDownError, when a blocking-strict sink cannot
// record its events; the caller answers 503 naming the sink. Call it once, after Begin, before serving.
//
// As in kube-apiserver, a request is refused when its RequestReceived event did not reach a blocking-strict sink.
// When the policy omits that stage (the default policy does) there is no such event: then a request is refused
// while a blocking-strict sink is down (its last write failed), but for one a second, whose event tries the sink
// again, so that it is found up once it recovers. Requests the policy does not record (level None) are served.
func (e *Entry) Admit() error {
	if e == nil || !e.a.strict || e.level.Less(auditinternal.LevelMetadata) {
		return nil
	}
	if e.strictChecked {
		return e.strictErr
	}
	for _, s := range e.a.sinks {
		if s.mode == ModeBlockingStrict && !s.admit() {
			return &SinkDownError{Sink: s.name}
		}
	}
	return nil
}

// RequestBody keeps the request's body for the event when the policy records the request at LevelRequest or above,
// when contentType is JSON (application/json, or a +json patch type) and b is valid JSON. Pass at most
// MaxRequestBody+1 bytes: a longer body is not kept, and the event says so (AnnotationRequestBody), as it does for
// a body that is not JSON. b may be reused once RequestBody returns.
func (e *Entry) RequestBody(b []byte, contentType string) {
	if e == nil || e.level.Less(auditinternal.LevelRequest) || e.completed {
		return
	}
	raw, note := jsonBody(b, contentType)
	if raw == nil {
		e.body, e.bodyNote = nil, note
		return
	}
	e.body, e.bodyNote = &runtime.Unknown{Raw: raw, ContentType: runtime.ContentTypeJSON}, ""
}

// Started records stage ResponseStarted of a long-running request (a watch, an upgrade, a log, an exec, a proxy)
// when its answer's headers were sent with code, unless the policy omits that stage (the default policy does).
// Other requests have no such stage, as in kube-apiserver.
func (e *Entry) Started(code int, at time.Time) {
	if e == nil || e.level.Less(auditinternal.LevelMetadata) || !e.longRunning || e.started || e.completed ||
		e.omits(auditinternal.StageResponseStarted) {
		return
	}
	e.started = true
	if at.IsZero() {
		at = e.a.clock.Now()
	}
	ev := e.event(auditinternal.StageResponseStarted, at)
	ev.ResponseStatus = &metav1.Status{Code: int32(code)}
	e.a.process(ev)
}

// Complete records stage ResponseComplete: the answer's code (101 for an upgrade, 499 when the client went away
// first), the bytes of its body that reached the client, and done, when it ended (zero is now). Later calls do
// nothing.
func (e *Entry) Complete(code int, responseBytes int64, done time.Time) {
	if e == nil || e.completed || e.level.Less(auditinternal.LevelMetadata) {
		return
	}
	e.completed = true
	if e.omits(auditinternal.StageResponseComplete) {
		return
	}
	if done.IsZero() {
		done = e.a.clock.Now()
	}
	ev := e.event(auditinternal.StageResponseComplete, done)
	ev.ResponseStatus = &metav1.Status{Code: int32(code)}
	ev.RequestObject = e.body
	ev.Annotations[AnnotationResponseBytes] = strconv.FormatInt(responseBytes, 10)
	ev.Annotations[AnnotationDuration] = strconv.FormatFloat(done.Sub(e.ev.RequestReceivedTimestamp.Time).Seconds(), 'f', -1, 64)
	if e.bodyNote != "" {
		ev.Annotations[AnnotationRequestBody] = e.bodyNote
	}
	e.a.process(ev)
}

func (e *Entry) omits(stage auditinternal.Stage) bool {
	return slices.Contains(e.omitStages, stage)
}

// event is a new event of stage, with the fields every stage has; its annotations are its own.
func (e *Entry) event(stage auditinternal.Stage, at time.Time) *auditinternal.Event {
	ev := e.ev
	ev.Stage = stage
	ev.StageTimestamp = metav1.NewMicroTime(at)
	ev.Annotations = make(map[string]string, len(e.ev.Annotations)+3)
	for k, v := range e.ev.Annotations {
		ev.Annotations[k] = v
	}
	return &ev
}
