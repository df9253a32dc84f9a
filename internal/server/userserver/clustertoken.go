package userserver

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/review"
)

// clusterTokenTTL is how long the cluster's answer about a token is kept, as the hub's answers are.
const clusterTokenTTL = 10 * time.Second

// tokenCheckTimeout bounds the round trip that asks the cluster about a token.
const tokenCheckTimeout = 10 * time.Second

// selfReview is what the user-server sends the cluster's kube-apiserver, through the service-proxy, with a token a
// BearerToken service's caller brought: a SelfSubjectAccessReview, which every authenticated user may create (and
// every kube-apiserver since 1.6 serves), and which changes nothing.
const selfReview = `{"apiVersion":"authorization.k8s.io/v1","kind":"SelfSubjectAccessReview",` +
	`"spec":{"nonResourceAttributes":{"path":"/","verb":"get"}}}`

// tokenVerdict is what the cluster said of a token.
type tokenVerdict int

const (
	tokenAuthenticates tokenVerdict = iota + 1
	tokenRefused
)

// clusterTokens asks a managed cluster whether a bearer token authenticates there, through its service-proxy (which
// reviews it with the cluster's TokenReview, or its OIDC issuer), and keeps the answers for a while. It is how a
// BearerToken service's caller who is not a hub user proves to be someone before anything reaches the service.
type clusterTokens struct {
	transport http.RoundTripper // the pool: plain requests to <cluster>:<port> reach its service-proxy
	port      int
	verdicts  *review.Cache[tokenVerdict]
}

func newClusterTokens(transport http.RoundTripper, port int, now func() time.Time) *clusterTokens {
	return &clusterTokens{transport: transport, port: port, verdicts: review.NewCache[tokenVerdict](clusterTokenTTL, now)}
}

// authenticates reports whether token authenticates on cluster; an error means the cluster could not be asked.
func (c *clusterTokens) authenticates(ctx context.Context, cluster, token string) (bool, error) {
	key := sha256.Sum256([]byte(cluster + "\x00" + token))
	if v, ok := c.verdicts.Get(key); ok {
		return v == tokenAuthenticates, nil
	}
	ctx, cancel := context.WithTimeout(ctx, tokenCheckTimeout)
	defer cancel()
	u := "http://" + net.JoinHostPort(cluster, strconv.Itoa(c.port)) + "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, strings.NewReader(selfReview))
	if err != nil {
		return false, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.transport.RoundTrip(req)
	if err != nil {
		return false, fmt.Errorf("ask cluster %s about a token: %w", cluster, err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	var v tokenVerdict
	switch {
	case resp.StatusCode == http.StatusUnauthorized:
		v = tokenRefused
	case resp.StatusCode < 300 || resp.StatusCode == http.StatusForbidden:
		// Created, or refused by the cluster's RBAC: either way the token said who its holder is.
		v = tokenAuthenticates
	default:
		return false, fmt.Errorf("ask cluster %s about a token: answered %s", cluster, resp.Status)
	}
	c.verdicts.Put(key, v)
	return v == tokenAuthenticates, nil
}
