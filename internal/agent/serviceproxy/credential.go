package serviceproxy

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"
)

// tokenFileRereadPeriod is how often the agent's token file is read again; kubelet rotates projected ServiceAccount
// tokens well before they expire (at 80% of a lifetime of at least ten minutes).
const tokenFileRereadPeriod = time.Minute

// agentToken is the agent's own bearer token for the managed cluster, the credential of impersonated requests. A
// token file is read again every period, so a rotated projected token is picked up; if a read fails, the last token
// read stays in use.
type agentToken struct {
	static string
	path   string
	period time.Duration
	now    func() time.Time

	mu     sync.Mutex
	token  string
	readAt time.Time
}

// newAgentToken takes the token of cfg: BearerTokenFile when set (as client-go does), else BearerToken. The file is
// read now, so a missing one stops the agent at start.
func newAgentToken(cfg *rest.Config) (*agentToken, error) {
	switch {
	case cfg.BearerTokenFile != "":
		t := &agentToken{path: cfg.BearerTokenFile, period: tokenFileRereadPeriod, now: time.Now}
		if _, err := t.get(); err != nil {
			return nil, fmt.Errorf("serviceproxy: %w", err)
		}
		return t, nil
	case cfg.BearerToken != "":
		return &agentToken{static: cfg.BearerToken}, nil
	}
	return nil, nil // impersonated requests are answered 503 (errNoAgentToken)
}

var errNoAgentToken = errors.New("identities are impersonated with the agent's bearer token, but the agent's kubeconfig has neither a token nor a token file")

func (t *agentToken) get() (string, error) {
	if t == nil {
		return "", errNoAgentToken
	}
	if t.path == "" {
		return t.static, nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	if t.token != "" && now.Sub(t.readAt) < t.period {
		return t.token, nil
	}
	data, err := os.ReadFile(t.path)
	token := strings.TrimSpace(string(data))
	if err == nil && token == "" {
		err = fmt.Errorf("token file %s is empty", t.path)
	}
	if err != nil {
		if t.token != "" {
			return t.token, nil // a rotation caught halfway; the last token is still valid for a while
		}
		return "", fmt.Errorf("read the agent's token: %w", err)
	}
	t.token, t.readAt = token, now
	return token, nil
}
