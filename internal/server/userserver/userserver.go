// Package userserver is the user-server: an HTTPS endpoint on the hub where https://<user-server>/<cluster>/... reaches
// that cluster's kube-apiserver, and .../api/v1/namespaces/<ns>/services/<[proto:]name[:port]>/proxy-service/...
// reaches an allow-listed service. Requests go as HTTP/1.1 to the agent's service-proxy through tunnels that are
// pooled per cluster; the tunnel is the mTLS hop.
//
// A caller's token is first reviewed on the hub. A hub token stops here: the hub's RBAC is asked whether its user may
// reach the cluster (clusters/proxy), and the request goes on without it, as impersonation of that user over a tunnel
// on which the proxy-server presents the impersonator certificate. Any other token (the cluster's own, an OIDC ID
// token) goes to the service-proxy, which authenticates it. The aggregated API comes in through ServeHubIdentity with
// a user the hub kube-apiserver already authenticated and authorized.
package userserver

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/uuid"
	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	apiaudit "k8s.io/apiserver/pkg/audit"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/allowlist"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/copybuf"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/packet"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/proxyhttp"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/review"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/tlsbatch"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/server/audit"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/server/hubidentity"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/server/sessionrec"
)

// Dialer opens a tunnel to a port of a cluster's agent.
type Dialer interface {
	DialCluster(ctx context.Context, cluster string, port int) (net.Conn, error)
}

// Clusters tells which clusters exist and which have an agent connected.
type Clusters interface {
	Connected(cluster string) bool
	Known(cluster string) bool
	// Reconnecting reports whether cluster has no agent connected but lost its last one so recently that a dial to
	// it waits for one to connect.
	Reconnecting(cluster string) bool
}

// HubReviewer answers who a token belongs to on the hub and whether a hub user may reach a cluster
// (*hubidentity.Reviewer).
type HubReviewer interface {
	Authenticate(ctx context.Context, token string) (hubidentity.Identity, bool, error)
	hubidentity.ClusterAuthorizer
}

// Options configure a Server. Dialer and Clusters are required; zero values of the others take the defaults.
type Options struct {
	Dialer   Dialer
	Clusters Clusters
	// Hub reviews callers' tokens on the hub; nil sends every token to the service-proxy as it came, which accepts
	// only the cluster's own and OIDC tokens.
	Hub HubReviewer
	// SkipHubAuthorization serves every hub user the hub authenticates, without asking the hub's RBAC about
	// clusters/proxy: the existing add-on's behaviour, where only the managed cluster's RBAC decides.
	SkipHubAuthorization bool
	// Mapping names hub users and groups on the managed clusters.
	Mapping hubidentity.Mapping
	// MetricsWithoutCluster records cluster_proxy_cluster_requests_total and
	// cluster_proxy_cluster_request_duration_seconds with an empty cluster label: one set of series for the whole
	// fleet instead of one per cluster, for a Prometheus that cannot hold clusters × verbs × codes. The access log
	// still names the cluster.
	MetricsWithoutCluster bool
	// ImpersonatorTLS is the TLS client side of the tunnels that carry hub users to a cluster's service-proxy: the
	// impersonator certificate, and the check that the agent answering is the cluster's (ImpersonatorTLSConfig). Hub
	// users are answered 503 without it.
	ImpersonatorTLS func(cluster string) *tls.Config
	// ServiceProxyPort is the tunnel port of the agent's service-proxy, default 7443.
	ServiceProxyPort int
	// Allowed lists the services reachable through the service form; the kube-apiserver is not subject to it.
	Allowed allowlist.List
	// MaxIdleConnsPerCluster is how many idle tunnels a cluster's pool keeps to its service-proxy, and to each of its
	// services reached by service tunnels, default 64.
	MaxIdleConnsPerCluster int
	// MaxConnsPerCluster bounds a cluster's tunnels, in use or idle, service tunnels included, default 2048; further
	// requests wait for one, and the cluster's idle tunnels are closed to make room.
	// Every watch, followed log, exec, attach and port-forward holds a tunnel for as long as it runs, so the bound is
	// well above what short requests need (MaxIdleConnsPerCluster) and what a cluster's long-lived streams are
	// expected to reach; it still caps what one cluster can make the proxy-server and its agent hold.
	MaxConnsPerCluster int
	// IdleConnTimeout closes a tunnel idle for that long, default 90s.
	IdleConnTimeout time.Duration
	// DrainTimeout bounds the drain after Serve's context ends, default 30s. MinDrainDuration is how long the server
	// keeps accepting with Ready false first, so load balancers notice, default 0.
	DrainTimeout, MinDrainDuration time.Duration
	// AgentWarmup is how long after New a cluster no agent has reached here yet is answered 503 with Retry-After
	// and Connection: close instead of 404: a new replica is Ready before the agents reach it (they look for it only
	// when one of their proxy-servers goes), and client-go retries such an answer on a new connection, which the
	// Service may send to a replica that has the cluster. Default 0: no warm-up.
	AgentWarmup time.Duration
	// Clock times the drain (MinDrainDuration and DrainTimeout) and AgentWarmup; default the real clock.
	Clock clock.WithDelayedExecution
	// Audit records an event of every request, served or refused, as its policy says; nil records none.
	Audit *audit.Auditor
	// Sessions records exec and attach sessions; nil records none.
	Sessions *sessionrec.Recorder
	// Replica names this proxy-server replica in the session recordings.
	Replica string
}

const (
	defaultServiceProxyPort = 7443
	defaultMaxIdle          = 64
	defaultMaxConns         = 2048
	defaultIdleConnTimeout  = 90 * time.Second
	defaultDrainTimeout     = 30 * time.Second
	// How often transports of clusters that disappeared are dropped.
	sweepInterval = 15 * time.Second
	// The request line and headers of a client must arrive within this (as the existing user-server does).
	readHeaderTimeout = 32 * time.Second
	// A client's idle keep-alive connection is closed after this.
	clientIdleTimeout = 5 * time.Minute
	// A status for the metric when the client went away before it got an answer (nginx's convention).
	statusClientClosed = 499
)

// Server is the user-server's http.Handler; Serve runs it on a listener and drains it.
type Server struct {
	opts     Options
	started  time.Time
	pool     *pool
	tokens   *clusterTokens // BearerToken services' callers who are not hub users
	proxy    *httputil.ReverseProxy
	ready    atomic.Bool
	hijacked hijackedConns
}

// New fills in the defaults. It panics without a Dialer or Clusters: that is a programming error, not bad input.
func New(opts Options) *Server {
	if opts.Dialer == nil || opts.Clusters == nil {
		panic("userserver: Options.Dialer and Options.Clusters are required")
	}
	if opts.ServiceProxyPort <= 0 {
		opts.ServiceProxyPort = defaultServiceProxyPort
	}
	if opts.MaxIdleConnsPerCluster <= 0 {
		opts.MaxIdleConnsPerCluster = defaultMaxIdle
	}
	if opts.MaxConnsPerCluster <= 0 {
		opts.MaxConnsPerCluster = defaultMaxConns
	}
	opts.MaxIdleConnsPerCluster = min(opts.MaxIdleConnsPerCluster, opts.MaxConnsPerCluster)
	if opts.IdleConnTimeout <= 0 {
		opts.IdleConnTimeout = defaultIdleConnTimeout
	}
	if opts.DrainTimeout <= 0 {
		opts.DrainTimeout = defaultDrainTimeout
	}
	opts.MinDrainDuration = max(opts.MinDrainDuration, 0)
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}

	s := &Server{
		opts:    opts,
		started: opts.Clock.Now(),
		pool: &pool{
			dialer:          opts.Dialer,
			impersonatorTLS: opts.ImpersonatorTLS,
			mapping:         opts.Mapping,
			port:            opts.ServiceProxyPort,
			maxIdle:         opts.MaxIdleConnsPerCluster,
			maxConns:        opts.MaxConnsPerCluster,
			idleConnTimeout: opts.IdleConnTimeout,
			clock:           opts.Clock,
			clusters:        map[string]*clusterPool{},
		},
		hijacked: hijackedConns{conns: map[*hijackedConn]struct{}{}},
	}
	s.tokens = newClusterTokens(s.pool, opts.ServiceProxyPort, opts.Clock.Now)
	s.proxy = &httputil.ReverseProxy{
		Rewrite:   s.rewrite,
		Transport: s.pool,
		// Watches and logs (no Content-Length) and event streams are flushed on every write, their headers at once:
		// ReverseProxy does that by itself. Other answers are written as they are copied, headers with the first
		// bytes; -1 here would flush their headers alone from a goroutine of its own, for every request.
		FlushInterval: 0,
		ErrorHandler:  s.proxyError,
		// A recorded session's stream is tapped once the cluster switched protocols.
		ModifyResponse: s.modifyResponse,
		BufferPool:     &copybuf.Pool{},
	}
	return s
}

// Ready is true while Serve accepts requests and is not draining.
func (s *Server) Ready() bool { return s.ready.Load() }

// The ways into a cluster, as the metrics and the access log name them.
const (
	viaUserServer = "user-server"
	viaAggregated = "aggregated"
)

// ServeHTTP answers with a Kubernetes Status itself when the request cannot go to the cluster, and proxies it
// otherwise.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// A token in a websocket subprotocol is reviewed, and goes on or stays here, as Authorization's does.
	if token := proxyhttp.TakeWebSocketBearer(r.Header); token != "" && r.Header.Get("Authorization") == "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	path := r.URL.EscapedPath()
	t, err := ParsePath(path)
	s.serveAndRecord(w, r, request{target: t, invalid: err, path: path, via: viaUserServer})
}

// ServeHubIdentity sends r to cluster as id, a hub user the hub kube-apiserver authenticated and authorized for
// clusters/proxy of cluster (the aggregated API). escapedPath is what follows proxy/ in the aggregated path, with its
// leading slash: a kube-apiserver path, or the service form. r's own credential headers are not sent on.
func (s *Server) ServeHubIdentity(w http.ResponseWriter, r *http.Request, cluster, escapedPath string, id hubidentity.Identity) {
	proxyhttp.TakeWebSocketBearer(r.Header) // the hub authenticated the user; no credential of theirs goes on
	t, err := ParseClusterPath(cluster, escapedPath)
	s.serveAndRecord(w, r, request{target: t, invalid: err, path: escapedPath, via: viaAggregated, hubUser: &id})
}

// RefuseHubIdentity answers a request of id to cluster that the aggregated API refused with a Status of code,
// reason and message, and logs, counts and audits it as the requests it sends on.
func (s *Server) RefuseHubIdentity(w http.ResponseWriter, r *http.Request, cluster, escapedPath string, id hubidentity.Identity,
	code int, reason metav1.StatusReason, message string) {
	t, err := ParseClusterPath(cluster, escapedPath)
	if err != nil {
		t = Target{Cluster: cluster, Path: escapedPath}
	}
	s.serveAndRecord(w, r, request{target: t, path: escapedPath, via: viaAggregated, hubUser: &id,
		refused: &gatewayRefusal{code: code, reason: reason, message: message}})
}

// request is what the user-server knows of a request before it serves it: where it goes (or why the path is
// invalid), the path as it arrived (for the access log), which way it came and, on the aggregated path, the hub user
// the hub kube-apiserver authenticated and authorized.
type request struct {
	target  Target
	invalid error
	path    string
	via     string
	hubUser *hubidentity.Identity
	// refused is the aggregated API's answer to a request it did not let through.
	refused *gatewayRefusal
	// auditID names the request in the audit events and the access log: the hub's Audit-ID on the aggregated path.
	auditID string
}

// gatewayRefusal is how the aggregated API answers a request it refused.
type gatewayRefusal struct {
	code    int
	reason  metav1.StatusReason
	message string
}

// voucher is a HubReviewer told of tokens the hub does not know that a managed cluster accepted
// (hubidentity.Reviewer.Vouch), so that made-up tokens do not delay their next review on the hub.
type voucher interface{ Vouch(token string) }

// clusterAuthenticated says whether an answer of the cluster's service-proxy to a request with a bearer token shows
// that the token authenticated there: it answers 401 for one it rejects, and 429 or 503 for one it could not review.
func clusterAuthenticated(code int) bool {
	return code < http.StatusInternalServerError && code != http.StatusUnauthorized && code != http.StatusTooManyRequests &&
		code != statusClientClosed
}

// served is what the access log and the metrics say of a request.
type served struct {
	cluster string
	user    string // the hub user; "" for a token the service-proxy authenticates
	// known says an agent of the cluster has reached this proxy-server: only then does the request count per cluster,
	// so that a name anyone may send never becomes a metric series.
	known bool
	// clusterToken says a token the hub does not know went to the cluster's kube-apiserver, whose service-proxy
	// reviews it there: an answer other than 401 says the cluster knows it (vouch).
	clusterToken bool
	// hubUser is the hub user, once the hub authenticated them.
	hubUser *hubidentity.Identity
	// audit is the request's audit, begun before it was sent on; nil for one answered here (it is begun at the end).
	audit *audit.Entry
	// body keeps the request's body for the audit event, when its policy level asks.
	body *auditedBody
}

func (s *Server) serveAndRecord(w http.ResponseWriter, r *http.Request, req request) {
	start := s.opts.Clock.Now()
	req.auditID = requestID(r, req.via)
	// The client can name the request to whoever reads the records, as the kube-apiserver's own Audit-ID lets it.
	w.Header().Set(auditinternal.HeaderAuditID, req.auditID)
	rec := &recorder{ResponseWriter: w, hijacked: &s.hijacked, batch: tlsbatch.ForRequest(r), clock: s.opts.Clock}
	info := s.serve(rec, r, req, start)
	via := req.via
	code := rec.code
	switch {
	case code == 0 && r.Context().Err() != nil:
		code = statusClientClosed
	case code == 0:
		code = http.StatusOK
	}
	if via == viaUserServer {
		requestsTotal.WithLabelValues(strconv.Itoa(code)).Inc()
	}
	if info.clusterToken && clusterAuthenticated(code) {
		if v, ok := s.opts.Hub.(voucher); ok {
			v.Vouch(proxyhttp.BearerToken(r.Header))
		}
	}
	verb := hubidentity.RequestVerb(r)
	answered := rec.answeredAt
	if answered.IsZero() {
		answered = s.opts.Clock.Now()
	}
	if info.cluster != "" && (s.opts.MetricsWithoutCluster || info.known) {
		label, verbLabel := info.cluster, metricVerb(verb)
		if s.opts.MetricsWithoutCluster {
			label = ""
		}
		clusterRequests.WithLabelValues(label, via, verbLabel, strconv.Itoa(code)).Inc()
		clusterRequestSeconds.WithLabelValues(label, via, verbLabel).Observe(answered.Sub(start).Seconds())
	}
	user := info.user
	if user == "" {
		user = "-"
	}
	// The path without its query, which may carry anything; never a header.
	klog.FromContext(r.Context()).Info("Access", "via", via, "cluster", info.cluster, "user", user, "verb", verb,
		"method", r.Method, "path", req.path, "code", code, "seconds", answered.Sub(start).Seconds(), "auditID", req.auditID)

	entry := info.audit
	if entry == nil && info.cluster != "" {
		entry = s.beginAudit(r, req, info.hubUser, start)
	}
	if info.body != nil {
		entry.RequestBody(info.body.kept, r.Header.Get("Content-Type"))
	}
	entry.Complete(code, rec.bytes.Load(), s.opts.Clock.Now())
}

// requestID is the audit ID of a request: the hub kube-apiserver's on the aggregated path (it sends it on, and the
// aggregated API's own filters take it), so that the events join the hub's audit log; a new one on the user-server,
// where a caller's Audit-ID header would let it name its requests after another's.
func requestID(r *http.Request, via string) string {
	if via == viaAggregated {
		if id, ok := apiaudit.AuditIDFrom(r.Context()); ok && id != "" {
			return string(id)
		}
	}
	return string(uuid.NewUUID())
}

// beginAudit begins the audit of a request to req's cluster as hubUser (nil: a token the cluster reviews, or none).
func (s *Server) beginAudit(r *http.Request, req request, hubUser *hubidentity.Identity, received time.Time) *audit.Entry {
	if s.opts.Audit == nil {
		return nil // and no source addresses parsed on every request for nothing
	}
	return s.opts.Audit.Begin(audit.Request{AuditID: req.auditID, Via: req.via, Cluster: req.target.Cluster, User: hubUser,
		Method: r.Method, EscapedPath: req.target.Path, RawQuery: r.URL.RawQuery, Header: r.Header,
		SourceIPs: sourceIPs(r), Received: received})
}

// sourceIPs are the request's X-Forwarded-For addresses, then its peer's, as the kube-apiserver records them.
func sourceIPs(r *http.Request) []string {
	ips := utilnet.SourceIPs(r)
	out := make([]string, len(ips))
	for i, ip := range ips {
		out[i] = ip.String()
	}
	return out
}

func (s *Server) serve(w *recorder, r *http.Request, req request, start time.Time) served {
	if g := req.refused; g != nil {
		proxyhttp.WriteStatus(w, g.code, g.reason, g.message)
		return served{cluster: req.target.Cluster, known: s.opts.Clusters.Known(req.target.Cluster), user: req.hubUser.User,
			hubUser: req.hubUser}
	}
	if req.invalid != nil {
		proxyhttp.WriteStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, req.invalid.Error())
		return served{}
	}
	t, id := req.target, req.hubUser
	info := served{cluster: t.Cluster, known: s.opts.Clusters.Known(t.Cluster)}
	ctx := r.Context()
	if id == nil {
		var ok bool
		if id, ok = s.authenticate(w, r, t); !ok {
			if id != nil {
				info.user = id.User
			}
			return info
		}
	}
	if id != nil {
		info.user, info.hubUser = id.User, id
		if s.opts.ImpersonatorTLS == nil {
			proxyhttp.WriteStatus(w, http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable,
				"this proxy-server has no impersonator certificate, so it cannot send hub users on")
			return info
		}
		// What proved who the user is stays on the hub.
		r.Header.Del("Authorization")
		ctx = hubidentity.WithIdentity(ctx, *id)
		// Whom the hub user asks to act as goes on as a question: the cluster's service-proxy lets the cluster's RBAC
		// decide whether the hub user may impersonate them, as the kube-apiserver would.
		proxyhttp.RequestImpersonation(r.Header)
	} else {
		proxyhttp.RemoveHeaderPrefix(r.Header, proxyhttp.RequestedImpersonatePrefix)
	}
	if svc := t.Service; svc != nil && !s.opts.Allowed.Allows(svc.Namespace, svc.Name, svc.Port) {
		proxyhttp.WriteStatus(w, http.StatusForbidden, metav1.StatusReasonForbidden,
			fmt.Sprintf("service %s/%s port %d is not in the user-server's allow-list", svc.Namespace, svc.Name, svc.Port))
		return info
	}
	if !info.known {
		if s.opts.Clock.Since(s.started) < s.opts.AgentWarmup {
			w.Header().Set("Retry-After", "1")
			w.Header().Set("Connection", "close")
			proxyhttp.WriteStatus(w, http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable,
				fmt.Sprintf("no agent of cluster %q has reached this proxy-server yet, which started %s ago; retry",
					t.Cluster, s.opts.Clock.Since(s.started).Round(time.Second)))
			return info
		}
		writeNotFound(w, t.Cluster)
		return info
	}
	if !s.opts.Clusters.Connected(t.Cluster) && !s.opts.Clusters.Reconnecting(t.Cluster) {
		writeNotConnected(w, t.Cluster)
		return info
	}
	if svc := t.Service; svc != nil && id == nil && !s.opts.Allowed.AllowsWithoutToken(svc.Namespace, svc.Name, svc.Port) &&
		!s.callerAuthenticates(w, r, t) {
		return info
	}
	ctx = context.WithValue(ctx, targetKey{}, t)
	if t.Service != nil {
		route, err := s.pool.serviceRoute(ctx, t)
		if err != nil {
			s.proxyError(w, r.WithContext(ctx), err)
			return info
		}
		if route != nil {
			ctx = context.WithValue(ctx, routeKey{}, route)
		}
	} else if id != nil {
		ctx = context.WithValue(ctx, impersonatedKey{}, true)
	} else {
		// Only the cluster's answers follow: the proxy's own, for a tunnel that failed, are 5xx.
		info.clusterToken = s.opts.Hub != nil && proxyhttp.BearerToken(r.Header) != ""
	}
	info.audit = s.beginAudit(r, req, info.hubUser, start)
	if err := info.audit.Admit(); err != nil {
		w.Header().Set("Retry-After", "1")
		proxyhttp.WriteStatus(w, http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable,
			fmt.Sprintf("the request cannot be audited, and the audit policy refuses requests it cannot record: %v", err))
		return info
	}
	if !info.audit.Level().Less(auditinternal.LevelRequest) && r.Body != nil && r.Body != http.NoBody {
		info.body = &auditedBody{ReadCloser: r.Body}
		r.Body = info.body
	}
	w.started = info.audit.Started
	ctx, ok := s.startRecording(w, r.WithContext(ctx), req, info.hubUser)
	if !ok {
		return info
	}
	s.proxy.ServeHTTP(w, r.WithContext(ctx))
	endRecording(ctx)
	return info
}

// auditedBody keeps the first audit.MaxRequestBody+1 bytes of a request body as it is read, for the audit event.
type auditedBody struct {
	io.ReadCloser
	kept []byte
}

func (b *auditedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if room := audit.MaxRequestBody + 1 - len(b.kept); room > 0 {
		b.kept = append(b.kept, p[:min(n, room)]...)
	}
	return n, err
}

// writeNotConnected answers a request to a cluster whose agent is not connected here, which nothing sent on: 503
// with Retry-After, which client-go (kubectl too) retries up to ten times a second apart, so an agent reconnecting
// (its forward proxy restarted, its pod replaced) costs its clients a wait, not a failure.
func writeNotConnected(w http.ResponseWriter, cluster string) {
	w.Header().Set("Retry-After", "1")
	proxyhttp.WriteStatus(w, http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable,
		fmt.Sprintf("the agent of cluster %q is not connected", cluster))
}

// writeNotFound answers a cluster this proxy-server has no agent of, as the API server answers a missing object.
func writeNotFound(w http.ResponseWriter, cluster string) {
	proxyhttp.WriteStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, fmt.Sprintf("cluster %q not found", cluster))
}

// authenticate checks the caller's token. A hub token yields its user (id), once the hub's RBAC lets them reach the
// cluster unless SkipHubAuthorization; any other token yields a nil id and goes to the service-proxy. ok is false
// when the request was answered here (id is then the hub user, when one was known).
func (s *Server) authenticate(w http.ResponseWriter, r *http.Request, t Target) (id *hubidentity.Identity, ok bool) {
	token := proxyhttp.BearerToken(r.Header)
	if svc := t.Service; token == "" && svc != nil && s.opts.Allowed.AllowsWithoutToken(svc.Namespace, svc.Name, svc.Port) {
		return nil, true // the service authenticates its callers
	}
	// Refusing a request without one here saves opening a tunnel.
	if token == "" {
		proxyhttp.WriteStatus(w, http.StatusUnauthorized, metav1.StatusReasonUnauthorized,
			`a bearer token is required: set the header "Authorization: Bearer <token>"`)
		return nil, false
	}
	if s.opts.Hub == nil {
		return nil, true
	}
	log := klog.FromContext(r.Context())
	hubID, isHub, err := s.opts.Hub.Authenticate(r.Context(), token)
	if errors.Is(err, review.ErrBusy) {
		// Made-up tokens are flooding the hub's reviews; the tokens the hub knew before have a lane of their own.
		w.Header().Set("Retry-After", "1")
		proxyhttp.WriteStatus(w, http.StatusTooManyRequests, metav1.StatusReasonTooManyRequests,
			"too many tokens are being reviewed on the hub; try again in a moment")
		return nil, false
	}
	if err != nil {
		// The token may be a hub token: it must not go to the cluster unreviewed.
		log.Error(err, "Cannot review a token on the hub", "cluster", t.Cluster)
		proxyhttp.WriteStatus(w, http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable,
			"cannot authenticate the request with the hub; try again later")
		return nil, false
	}
	if !isHub {
		return nil, true
	}
	if t.Service != nil && proxyhttp.HasHeaderPrefix(r.Header, "Impersonate-") {
		proxyhttp.WriteStatus(w, http.StatusForbidden, metav1.StatusReasonForbidden,
			"Impersonate-* headers are not served with a hub token to a service; they ask the cluster's kube-apiserver")
		return &hubID, false
	}
	if s.opts.SkipHubAuthorization {
		return &hubID, true
	}
	verb := hubidentity.RequestVerb(r)
	decision, err := s.opts.Hub.Authorize(r.Context(), hubID, t.Cluster, verb)
	if err != nil {
		log.Error(err, "Cannot ask the hub's RBAC", "cluster", t.Cluster, "user", hubID.User)
		proxyhttp.WriteStatus(w, http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable,
			"cannot authorize the request with the hub; try again later")
		return &hubID, false
	}
	if !decision.Allowed {
		proxyhttp.WriteStatus(w, http.StatusForbidden, metav1.StatusReasonForbidden,
			hubidentity.Denied(hubID.User, verb, t.Cluster, decision.Reason))
		return &hubID, false
	}
	return &hubID, true
}

// metricVerb keeps the verb label to the verbs of the HTTP methods Kubernetes serves; any other method is "other".
func metricVerb(verb string) string {
	switch verb {
	case "get", "create", "update", "patch", "delete", "options", "connect":
		return verb
	}
	return "other"
}

// callerAuthenticates checks, for a service whose callers must bring a bearer token (callerAuthentication
// BearerToken), that a token which is not a hub user's authenticates on the cluster (its TokenReview, or its OIDC
// issuer, through the service-proxy) before the request reaches the service: "a token" must be a valid one. It
// answers the request and returns false otherwise.
func (s *Server) callerAuthenticates(w http.ResponseWriter, r *http.Request, t Target) bool {
	token := proxyhttp.BearerToken(r.Header)
	if token == "" {
		return true
	}
	ok, err := s.tokens.authenticates(r.Context(), t.Cluster, token)
	if err != nil {
		klog.FromContext(r.Context()).Error(err, "Cannot review a service caller's token on the cluster", "cluster", t.Cluster)
		proxyhttp.WriteStatus(w, http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable,
			fmt.Sprintf("cannot authenticate the request with cluster %q; try again later", t.Cluster))
		return false
	}
	if !ok {
		proxyhttp.WriteStatus(w, http.StatusUnauthorized, metav1.StatusReasonUnauthorized,
			fmt.Sprintf("the bearer token authenticates neither on the hub nor on cluster %q", t.Cluster))
		return false
	}
	return true
}

// impersonatedKey marks a request that goes to the cluster's kube-apiserver as a hub user: through the tunnels on
// which the proxy-server presents the impersonator certificate.
type impersonatedKey struct{}

type targetKey struct{}

// rewrite addresses the cluster's service-proxy, or the service itself when the request goes through a service
// route. ReverseProxy has already removed hop-by-hop headers (and put back Connection and Upgrade for an upgrade);
// Authorization and Impersonate-* pass unchanged, the service-proxy or the service decides.
func (s *Server) rewrite(pr *httputil.ProxyRequest) {
	t, _ := pr.In.Context().Value(targetKey{}).(Target)
	for k := range pr.Out.Header {
		// Also the underscore spelling, which some servers read as the same header.
		if len(k) >= len(proxyhttp.HeaderPrefix) && strings.EqualFold(strings.ReplaceAll(k[:len(proxyhttp.HeaderPrefix)], "_", "-"), proxyhttp.HeaderPrefix) {
			delete(pr.Out.Header, k)
		}
	}
	pr.Out.URL.Scheme = "http"
	pr.Out.URL.Host = net.JoinHostPort(t.Cluster, strconv.Itoa(s.opts.ServiceProxyPort))
	pr.Out.URL.Path = t.Path
	pr.Out.URL.RawPath = ""
	pr.Out.Host = ""
	pr.SetXForwarded()
	if route, ok := pr.In.Context().Value(routeKey{}).(*serviceRoute); ok {
		pr.Out.Host = route.hostHeader()
		return
	}
	if t.Service != nil {
		setServiceHeaders(pr.Out.Header, *t.Service)
	}
}

// proxyError answers a failed tunnel or round trip. The error stays in the log: it may name internals.
func (s *Server) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	t, _ := r.Context().Value(targetKey{}).(Target)
	log := klog.FromContext(r.Context())
	if r.Context().Err() != nil {
		log.V(4).Info("Client went away before the cluster answered", "cluster", t.Cluster, "err", err)
		return
	}
	var refused *refusal
	if errors.As(err, &refused) {
		log.V(2).Info("The service-proxy refused a service tunnel", "cluster", t.Cluster, "code", refused.code)
		refused.write(w)
		return
	}
	if errors.Is(err, errUnrecordable) {
		log.Info("Refusing a session the recorder cannot read", "cluster", t.Cluster)
		proxyhttp.WriteStatus(w, http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable,
			"this session cannot be recorded ("+errUnrecordable.Error()+"), and sessions that cannot be recorded are refused")
		return
	}
	if errors.Is(err, packet.ErrAgentBusy) {
		log.V(2).Info("The cluster's agent carries as much as this proxy-server allows", "cluster", t.Cluster)
		w.Header().Set("Retry-After", "1")
		proxyhttp.WriteStatus(w, http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable,
			fmt.Sprintf("the agent of cluster %q carries as many connections as this proxy-server allows; try again", t.Cluster))
		return
	}
	if errors.Is(err, packet.ErrNoAgent) {
		// The agent left between the check above and the dial.
		log.V(2).Info("No agent of the cluster took the dial", "cluster", t.Cluster)
		writeNotConnected(w, t.Cluster)
		return
	}
	log.Error(err, "Proxying to the service-proxy failed", "cluster", t.Cluster)
	if _, hubUser := r.Context().Value(impersonatedKey{}).(bool); hubUser && errors.As(err, new(tls.RecordHeaderError)) {
		// The service-proxy answered the impersonator's handshake in plain HTTP: an agent from before hub users went
		// downstream as impersonation, during an upgrade.
		proxyhttp.WriteStatus(w, http.StatusBadGateway, metav1.StatusReasonServiceUnavailable, fmt.Sprintf(
			"the agent of cluster %q is older than this proxy-server and does not serve hub users yet; it will once it "+
				"is updated (the cluster's own tokens work meanwhile)", t.Cluster))
		return
	}
	// Kubernetes has no reason for 502; ServiceUnavailable makes clients treat it as transient, not their fault.
	proxyhttp.WriteStatus(w, http.StatusBadGateway, metav1.StatusReasonServiceUnavailable,
		fmt.Sprintf("the agent of cluster %q could not be reached", t.Cluster))
}

// Serve serves ln (already TLS) until ctx ends, then drains: Ready turns false, the server keeps accepting for
// MinDrainDuration, stops accepting and waits up to DrainTimeout for requests and upgraded connections to finish,
// then closes what remains. It returns nil after a drain, and the error if serving fails first. Call it once.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	log := klog.FromContext(ctx)
	srv := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       clientIdleTimeout,
		// Requests carry ctx's values (the logger) but not its end: draining is how they end.
		BaseContext: func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
		ConnContext: tlsbatch.ConnContext,
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	s.ready.Store(true)

	sweepCtx, stopSweep := context.WithCancel(context.Background())
	defer stopSweep()
	go s.sweepLoop(sweepCtx)

	select {
	case err := <-served:
		s.ready.Store(false)
		s.hijacked.closeAll()
		s.pool.closeIdle()
		return fmt.Errorf("serve user-server: %w", err)
	case <-ctx.Done():
	}

	s.ready.Store(false)
	log.Info("Draining the user-server", "minDrainDuration", s.opts.MinDrainDuration, "drainTimeout", s.opts.DrainTimeout)
	if s.opts.MinDrainDuration > 0 {
		wait := s.opts.Clock.NewTimer(s.opts.MinDrainDuration)
		select {
		case <-wait.C():
		case err := <-served: // the listener failed meanwhile; drain what is left
			log.Error(err, "User-server stopped accepting before the drain")
		}
		wait.Stop()
	}
	drainCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bound := s.opts.Clock.AfterFunc(s.opts.DrainTimeout, cancel)
	defer bound.Stop()
	// Shutdown stops accepting, closes idle connections and waits for active ones; upgraded (hijacked) connections
	// are ours to wait for.
	if err := srv.Shutdown(drainCtx); err != nil {
		log.Info("Drain timed out, closing the remaining connections", "err", err)
		_ = srv.Close()
	}
	if !s.hijacked.wait(drainCtx) {
		log.Info("Drain timed out, closing the remaining upgraded connections")
	}
	s.hijacked.closeAll()
	s.pool.closeIdle()
	log.Info("User-server drained")
	return nil
}

func (s *Server) sweepLoop(ctx context.Context) {
	tick := time.NewTicker(sweepInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			s.pool.sweep(s.opts.Clusters)
		}
	}
}

// recorder remembers the status code and when the answer began for the metrics, and tracks a hijacked connection so
// the drain can end it. Flush and the rest reach the underlying writer through Unwrap (http.ResponseController).
type recorder struct {
	http.ResponseWriter
	hijacked   *hijackedConns
	code       int
	answeredAt time.Time
	clock      clock.PassiveClock
	batch      *tlsbatch.Conn // beneath an HTTP/1 connection's TLS, or nil
	// bytes counts what reached the client after the headers, an upgraded connection's too.
	bytes atomic.Int64
	// started is told the code when the answer begins (the audit's ResponseStarted), if set.
	started func(code int, at time.Time)
}

func (w *recorder) answered(code int) {
	if w.code == 0 {
		w.code = code
		w.answeredAt = w.clock.Now()
		if w.started != nil {
			w.started(code, w.answeredAt)
		}
	}
}

func (w *recorder) WriteHeader(code int) {
	if code >= http.StatusOK { // 1xx are informational, the final code comes later
		w.answered(code)
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *recorder) Write(b []byte) (int, error) {
	w.answered(http.StatusOK)
	// The reverse proxy copies bodies 32 KiB at a time: two records in one system call.
	n, err := w.batch.BatchedWrite(w.ResponseWriter, b)
	w.bytes.Add(int64(n))
	return n, err
}

func (w *recorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	w.answered(http.StatusSwitchingProtocols)
	return w.hijacked.track(c, &w.bytes), brw, nil
}

// hijackedConns are the upgraded connections (exec, attach, port-forward, websockets), which http.Server.Shutdown
// neither waits for nor closes.
type hijackedConns struct {
	mu     sync.Mutex
	conns  map[*hijackedConn]struct{}
	empty  chan struct{} // closed when conns becomes empty while someone waits
	closed bool
}

func (h *hijackedConns) track(c net.Conn, written *atomic.Int64) net.Conn {
	hc := &hijackedConn{Conn: c, set: h, written: written}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		_ = c.Close()
	} else {
		h.conns[hc] = struct{}{}
	}
	return hc
}

func (h *hijackedConns) remove(hc *hijackedConn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.conns, hc)
	if len(h.conns) == 0 && h.empty != nil {
		close(h.empty)
		h.empty = nil
	}
}

// wait reports whether every upgraded connection ended before ctx did.
func (h *hijackedConns) wait(ctx context.Context) bool {
	h.mu.Lock()
	if len(h.conns) == 0 {
		h.mu.Unlock()
		return true
	}
	if h.empty == nil {
		h.empty = make(chan struct{})
	}
	empty := h.empty
	h.mu.Unlock()
	select {
	case <-empty:
		return true
	case <-ctx.Done():
		return false
	}
}

func (h *hijackedConns) closeAll() {
	h.mu.Lock()
	h.closed = true
	conns := make([]*hijackedConn, 0, len(h.conns))
	for hc := range h.conns {
		conns = append(conns, hc)
	}
	h.mu.Unlock()
	for _, hc := range conns {
		_ = hc.Close()
	}
}

type hijackedConn struct {
	net.Conn
	set     *hijackedConns
	once    sync.Once
	written *atomic.Int64
}

func (c *hijackedConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.written.Add(int64(n))
	return n, err
}

func (c *hijackedConn) Close() error {
	c.once.Do(func() { c.set.remove(c) })
	return c.Conn.Close()
}

// CloseWrite keeps half-close working for ReverseProxy, which looks for it on the connection it got from Hijack.
func (c *hijackedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}
