package agent

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
)

// LeaseRenewer keeps the add-on Lease on the managed cluster fresh while the agent has a tunnel, the way OCM add-on
// agents report that they work: OCM marks the add-on unavailable once the Lease has not been renewed for a while,
// so an agent that cannot reach the hub must stop renewing it rather than pretend to be healthy.
type LeaseRenewer struct {
	Client    kubernetes.Interface
	Namespace string
	Name      string
	// Holder is written as holderIdentity (the agent ID).
	Holder string
	// Connected reports whether a tunnel is up.
	Connected func() bool
	// Interval between renewals (10 s when zero); a tunnel coming up renews at once.
	Interval time.Duration
	// Check is how often Connected is looked at (1 s when zero).
	Check time.Duration
	// DurationSeconds is leaseDurationSeconds (60 when zero).
	DurationSeconds int32
	// Clock times Interval and Check and stamps renewTime; default the real clock.
	Clock clock.WithTicker
	Log   logr.Logger
}

func (r *LeaseRenewer) clock() clock.WithTicker {
	if r.Clock == nil {
		return clock.RealClock{}
	}
	return r.Clock
}

// Run renews the Lease until ctx ends.
func (r *LeaseRenewer) Run(ctx context.Context) {
	interval, check := r.Interval, r.Check
	setDefault(&interval, 10*time.Second)
	setDefault(&check, time.Second)
	clk := r.clock()
	ticker := clk.NewTicker(check)
	defer ticker.Stop()
	var last time.Time
	wasConnected, failing := false, false
	for {
		connected := r.Connected()
		if connected && (!wasConnected || clk.Since(last) >= interval) {
			last = clk.Now()
			if err := r.Renew(ctx); err != nil {
				if !failing {
					r.Log.Error(err, "Cannot renew the add-on lease", "namespace", r.Namespace, "name", r.Name)
				}
				failing = true
			} else if failing {
				r.Log.Info("Renewing the add-on lease again", "namespace", r.Namespace, "name", r.Name)
				failing = false
			}
		}
		wasConnected = connected
		select {
		case <-ctx.Done():
			return
		case <-ticker.C():
		}
	}
}

// Renew creates the Lease or moves its renewTime to now.
func (r *LeaseRenewer) Renew(ctx context.Context) error {
	leases := r.Client.CoordinationV1().Leases(r.Namespace)
	duration := r.DurationSeconds
	setDefault(&duration, 60)
	now := metav1.NewMicroTime(r.clock().Now())
	lease, err := leases.Get(ctx, r.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		lease = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: r.Name, Namespace: r.Namespace},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity:       ptr.To(r.Holder),
				LeaseDurationSeconds: ptr.To(duration),
				AcquireTime:          &now,
				RenewTime:            &now,
			},
		}
		if _, err := leases.Create(ctx, lease, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create lease %s/%s: %w", r.Namespace, r.Name, err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("get lease %s/%s: %w", r.Namespace, r.Name, err)
	}
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != r.Holder {
		lease.Spec.HolderIdentity = ptr.To(r.Holder)
		lease.Spec.AcquireTime = &now
	}
	lease.Spec.LeaseDurationSeconds = ptr.To(duration)
	lease.Spec.RenewTime = &now
	if _, err := leases.Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update lease %s/%s: %w", r.Namespace, r.Name, err)
	}
	return nil
}
