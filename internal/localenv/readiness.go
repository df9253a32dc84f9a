package localenv

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
)

const pollInterval = 500 * time.Millisecond

// errPollTimeout is poll's error when its timeout passes; callers turn it into a message about what they waited for.
var errPollTimeout = errors.New("timed out")

// poll calls check every pollInterval until it reports done or fails, the timeout passes, ctx ends or the
// manager exits: a dead manager would otherwise turn into a confusing timeout minutes later.
func (s *session) poll(ctx context.Context, timeout time.Duration, check func(context.Context) (bool, error)) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()
	for {
		done, err := check(ctx)
		if err != nil || done {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.manager.Done():
			return s.managerExitedEarly()
		case <-deadline.C:
			return errPollTimeout
		case <-ticker.C:
		}
	}
}

// waitReady waits until every ManagedProxyConfiguration is Ready, printing a line whenever the conditions one
// still waits for change, and returns them.
func (s *session) waitReady(ctx context.Context) ([]proxyv1alpha1.ManagedProxyConfiguration, error) {
	s.p.step("waiting up to %s for every ManagedProxyConfiguration to be Ready", s.opts.Timeout)
	var mpcs []proxyv1alpha1.ManagedProxyConfiguration
	lastPending := map[string]string{} // configuration name -> the pending condition types last printed
	err := s.poll(ctx, s.opts.Timeout, func(ctx context.Context) (bool, error) {
		list := &proxyv1alpha1.ManagedProxyConfigurationList{}
		if err := s.client.List(ctx, list); err != nil {
			return false, fmt.Errorf("list ManagedProxyConfigurations: %w", err)
		}
		mpcs = list.Items
		allReady := len(mpcs) > 0
		for i := range mpcs {
			if !s.reportPending(&mpcs[i], lastPending) {
				allReady = false
			}
		}
		return allReady, nil
	})
	if errors.Is(err, errPollTimeout) {
		s.printNotReady(mpcs)
		return nil, fmt.Errorf("ManagedProxyConfigurations were not Ready within %s", s.opts.Timeout)
	}
	return mpcs, err
}

// reportPending prints the configuration's not-yet-true conditions when their set differs from the last print,
// and says whether the configuration is Ready.
func (s *session) reportPending(mpc *proxyv1alpha1.ManagedProxyConfiguration, lastPending map[string]string) bool {
	ready := isReady(mpc)
	key, line := pendingState(mpc, ready)
	if previous, seen := lastPending[mpc.Name]; !seen || previous != key {
		lastPending[mpc.Name] = key
		s.p.detail("%s: %s", mpc.Name, line)
	}
	return ready
}

// pendingState returns a key that changes only when the set of pending conditions does, and a line describing it.
func pendingState(mpc *proxyv1alpha1.ManagedProxyConfiguration, ready bool) (key, line string) {
	pending := pendingConditions(mpc)
	switch {
	case ready:
		return "ready", "Ready"
	case len(mpc.Status.Conditions) == 0:
		return "none", "no conditions reported yet"
	case len(pending) == 0:
		return "stale", fmt.Sprintf("conditions describe a generation older than %d", mpc.Generation)
	}
	types := make([]string, 0, len(pending))
	for _, c := range pending {
		types = append(types, c.Type)
	}
	return strings.Join(types, ","), "waiting for " + describeConditions(pending)
}

// isReady is true when Ready is True for the configuration's current generation, not an older one.
func isReady(mpc *proxyv1alpha1.ManagedProxyConfiguration) bool {
	c := meta.FindStatusCondition(mpc.Status.Conditions, proxyv1alpha1.ConditionReady)
	return c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration >= mpc.Generation
}

// pendingConditions are the conditions that are not True, in display order.
func pendingConditions(mpc *proxyv1alpha1.ManagedProxyConfiguration) []metav1.Condition {
	var pending []metav1.Condition
	for _, c := range sortedConditions(mpc.Status.Conditions) {
		if c.Status != metav1.ConditionTrue {
			pending = append(pending, c)
		}
	}
	return pending
}

func describeConditions(conds []metav1.Condition) string {
	parts := make([]string, 0, len(conds))
	for _, c := range conds {
		parts = append(parts, fmt.Sprintf("%s=%s (%s)", c.Type, c.Status, c.Reason))
	}
	return strings.Join(parts, ", ")
}

// conditionOrder is the order the operator evaluates its conditions in, so a table reads top-down like the
// reconcile does; Ready, the summary, comes last.
var conditionOrder = []string{
	proxyv1alpha1.ConditionSignerReady,
	proxyv1alpha1.ConditionEntrypointReady,
	proxyv1alpha1.ConditionProxyServerSecretSigned,
	proxyv1alpha1.ConditionAgentServerSecretSigned,
	proxyv1alpha1.ConditionProxyClientSecretSigned,
	proxyv1alpha1.ConditionUserServerSecretSigned,
	proxyv1alpha1.ConditionProxyServerDeployed,
	proxyv1alpha1.ConditionReady,
}

// sortedConditions orders known conditions by conditionOrder and puts unknown ones, alphabetically, before Ready.
func sortedConditions(conds []metav1.Condition) []metav1.Condition {
	rank := func(t string) int {
		if i := slices.Index(conditionOrder, t); i >= 0 {
			if t == proxyv1alpha1.ConditionReady {
				return len(conditionOrder) + 1
			}
			return i
		}
		return len(conditionOrder)
	}
	sorted := slices.Clone(conds)
	slices.SortStableFunc(sorted, func(a, b metav1.Condition) int {
		if d := rank(a.Type) - rank(b.Type); d != 0 {
			return d
		}
		return strings.Compare(a.Type, b.Type)
	})
	return sorted
}

// printNotReady shows every condition in full after a timeout, and the end of the manager's log, which usually
// says why.
func (s *session) printNotReady(mpcs []proxyv1alpha1.ManagedProxyConfiguration) {
	s.p.step("timed out after %s waiting for readiness", s.opts.Timeout)
	if len(mpcs) == 0 {
		s.p.detail("no ManagedProxyConfiguration exists on the hub")
	}
	for i := range mpcs {
		mpc := &mpcs[i]
		s.p.detail("ManagedProxyConfiguration %s (generation %d):", mpc.Name, mpc.Generation)
		if len(mpc.Status.Conditions) == 0 {
			s.p.detail("  no conditions reported")
		}
		for _, c := range sortedConditions(mpc.Status.Conditions) {
			s.p.detail("  %s=%s reason=%s message=%q", c.Type, c.Status, c.Reason, c.Message)
		}
	}
	s.printLogTail(s.manager.LogPath())
}
