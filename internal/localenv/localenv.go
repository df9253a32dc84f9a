// Package localenv runs a local hub for development: envtest's etcd and kube-apiserver with the operator's and
// OCM's CRDs, kube-controller-manager's garbage collector, the manager binary, and the sample configuration,
// until it is Ready and then until the caller stops it. 'make run' uses it through cmd/localhub.
package localenv

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testenv"
)

// Run starts the local hub, applies the samples, waits until every ManagedProxyConfiguration is Ready, prints a
// summary and then keeps the hub up until ctx ends (or returns at once with ExitWhenReady). Whatever happens,
// everything it started is stopped before it returns; an interruption before readiness returns ctx's error.
func Run(ctx context.Context, opts Options) (err error) {
	opts, err = opts.withDefaults()
	if err != nil {
		return err
	}
	s := &session{opts: opts, p: newProgress(opts.Out)}
	defer func() {
		if s.cleanups.empty() {
			return // nothing was started, e.g. a sample did not parse
		}
		err = errors.Join(err, s.cleanups.unwind(s.p))
		s.p.step("stopped")
	}()
	err = s.run(ctx)
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		// Labelled so callers can tell Ctrl-C from a failure (errors.Is(err, context.Canceled) still holds).
		s.p.step("interrupted (%v)", context.Cause(ctx))
		return fmt.Errorf("interrupted before the hub was ready: %w", err)
	}
	return err
}

// session is one run of the local hub and what it has started so far.
type session struct {
	opts     Options
	p        *progress
	cleanups cleanupStack

	workDir string
	env     *envtest.Environment
	client  client.Client
	manager *testenv.Process
}

func (s *session) run(ctx context.Context) error {
	// Samples are read first: a broken file should fail before a control plane is started for nothing.
	samples, err := loadSamples(s.opts.SamplesPath)
	if err != nil {
		return err
	}
	steps := []func(context.Context) error{
		s.prepareWorkDir,
		s.startHub,
		s.writeKubeconfigs,
		s.startGarbageCollector,
		s.startManager,
		func(ctx context.Context) error { return s.applySamples(ctx, samples) },
	}
	for _, step := range steps {
		// The control plane's start cannot be interrupted, so check between steps.
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := step(ctx); err != nil {
			return err
		}
	}
	mpcs, err := s.waitReady(ctx)
	if err != nil {
		return err
	}
	s.printSummary(mpcs)
	if s.opts.ExitWhenReady {
		s.p.step("exiting as asked (--exit-when-ready)")
		return nil
	}
	return s.serve(ctx)
}

// serve keeps the hub up until ctx ends, which is the normal way to stop it, or the manager dies.
func (s *session) serve(ctx context.Context) error {
	s.p.plain("Press Ctrl-C to stop.")
	select {
	case <-ctx.Done():
		s.p.step("stopping (%v)", context.Cause(ctx))
		return nil
	case <-s.manager.Done():
		return s.managerExitedEarly()
	}
}

func (s *session) path(name string) string {
	return filepath.Join(s.workDir, name)
}
