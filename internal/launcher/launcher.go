// Package launcher stands in for the kubelet in the local environment, where pods never run: it starts the
// proxy-server from the hub's proxy-server Deployment and each proxy-agent from the Deployment OCM's work agent applied
// to its managed cluster, as processes on 127.0.0.1.
//
// A process runs the container's command and arguments as rendered, with the local binary in place of the image,
// $(VAR) references expanded and mount paths pointing at files materialised from the live Secrets and ConfigMaps of
// the cluster the pod runs on. The only additions are what a pod gets from Kubernetes, said on the program's command
// line (see programs): a hostname (--server-id, --agent-id), its own network namespace (listeners bound to loopback,
// a taken shared port moved), an in-cluster configuration (--kubeconfig with a TokenRequest token), Service addresses
// (--resolve from Options.Addresses), and the KUBERNETES_SERVICE_HOST/PORT and HOSTNAME variables. Nothing else is
// invented.
//
// Deployments, Secrets and ConfigMaps are watched with informers rather than polled: a Secret renewal, an edited
// ConfigMap or a rollout reaches the processes within a watch event, as the kubelet's watch-based secret and configMap
// managers do, and a steady state costs the apiservers nothing, where polling every Secret and ConfigMap of every
// cluster each second would not.
package launcher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"
)

// Binaries are the local programs that stand in for the container images.
type Binaries struct{ ProxyServer, ProxyAgent string }

// Target is one control plane.
type Target struct {
	Name   string       // "hub" or the managed cluster name
	Config *rest.Config // admin config of that control plane
}

// Options configure a Launcher.
type Options struct {
	// Hub runs the proxy-server Deployments; Clusters run the agent Deployment each.
	Hub      Target
	Clusters []Target
	Binaries Binaries
	// WorkDir holds each pod's files (WorkDir/<pod>/<mountPath>/<key>) and log (WorkDir/<pod>.log), where <pod> is
	// <cluster>_<namespace>_<name>. The caller removes it.
	WorkDir string
	// Log receives the launcher's own lines (starts, exits, rollouts, rewritten Secrets and ConfigMaps); nil discards
	// them.
	Log io.Writer
	// Addresses maps in-cluster host:port (e.g. proxy-entrypoint.open-cluster-management-addon.svc:8091) to loopback
	// host:port, as hostAliases/Services would on a real cluster.
	Addresses map[string]string
}

// Launcher runs the pods of the watched Deployments as processes until Stop.
type Launcher struct {
	opts     Options
	clusters []*cluster
	ports    ports

	cancel   context.CancelFunc
	kick     chan struct{}
	loopDone chan struct{}
	dirtyMu  sync.Mutex
	dirty    map[string]bool // clusters with a watch event since the last reconcile
	workers  sync.WaitGroup  // every podWorker ever started

	mu   sync.Mutex
	pods map[podKey]*podWorker // the pods that should run
	last map[podKey]*podWorker // the latest worker of each pod, possibly finishing
	errs []error

	logMu    sync.Mutex
	stopOnce sync.Once
	stopErr  error
}

// Start watches the control planes and runs their pods until Stop (or until ctx ends, which stops them as well).
func Start(ctx context.Context, opts Options) (*Launcher, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	if err := os.MkdirAll(opts.WorkDir, 0o700); err != nil {
		return nil, fmt.Errorf("work folder: %w", err)
	}
	l := &Launcher{
		opts: opts, kick: make(chan struct{}, 1), loopDone: make(chan struct{}), dirty: map[string]bool{},
		pods: map[podKey]*podWorker{}, last: map[podKey]*podWorker{},
	}
	hub, err := newCluster(opts.Hub, serverSelection(), func() { l.trigger(opts.Hub.Name) })
	if err != nil {
		return nil, err
	}
	l.clusters = append(l.clusters, hub)
	for _, t := range opts.Clusters {
		c, err := newCluster(t, agentSelection(), func() { l.trigger(t.Name) })
		if err != nil {
			return nil, err
		}
		l.clusters = append(l.clusters, c)
	}

	ctx, l.cancel = context.WithCancel(ctx)
	for _, c := range l.clusters {
		c.start(ctx)
	}
	go l.loop(ctx)
	l.logf("Watching %d control planes; work folder %s", len(l.clusters), opts.WorkDir)
	return l, nil
}

func (o Options) validate() error {
	var errs []error
	names := map[string]bool{}
	for _, t := range append([]Target{o.Hub}, o.Clusters...) {
		switch {
		case t.Name == "" || strings.ContainsAny(t.Name, "/_") || t.Name == "." || t.Name == "..":
			errs = append(errs, fmt.Errorf("target name %q: want a cluster name", t.Name))
		case names[t.Name]:
			errs = append(errs, fmt.Errorf("target name %q is used twice", t.Name))
		case t.Config == nil:
			errs = append(errs, fmt.Errorf("target %s has no Config", t.Name))
		}
		names[t.Name] = true
	}
	if o.WorkDir == "" {
		errs = append(errs, errors.New("WorkDir is required"))
	}
	for _, b := range []string{o.Binaries.ProxyServer, o.Binaries.ProxyAgent} {
		if b == "" {
			continue
		}
		if _, err := os.Stat(b); err != nil {
			errs = append(errs, fmt.Errorf("binary: %w", err))
		}
	}
	for from, to := range o.Addresses {
		for _, hp := range []string{from, to} {
			if host, port, err := net.SplitHostPort(hp); err != nil || host == "" || port == "" {
				errs = append(errs, fmt.Errorf("address mapping %s=%s: %q is not host:port", from, to, hp))
			}
		}
	}
	return errors.Join(errs...)
}

// Stop ends every process (SIGTERM, then SIGKILL after the pod's termination grace period), waits until each is
// reaped, removes the pods' files (logs stay) and stops watching. It is safe to call more than once.
func (l *Launcher) Stop() error {
	l.stopOnce.Do(func() {
		l.cancel()
		<-l.loopDone // no pod is started after this
		l.workers.Wait()
		for _, c := range l.clusters {
			c.shutdown()
		}
		l.mu.Lock()
		l.stopErr = errors.Join(l.errs...)
		l.mu.Unlock()
		l.logf("Stopped")
	})
	return l.stopErr
}

// Pods are the pods that should run now, sorted by cluster, namespace and name.
func (l *Launcher) Pods() []PodStatus {
	l.mu.Lock()
	workers := make([]*podWorker, 0, len(l.pods))
	for _, w := range l.pods {
		workers = append(workers, w)
	}
	l.mu.Unlock()
	out := make([]PodStatus, 0, len(workers))
	for _, w := range workers {
		out = append(out, w.snapshot())
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Cluster != b.Cluster {
			return a.Cluster < b.Cluster
		}
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		return a.Name < b.Name
	})
	return out
}

// trigger records a watch event of a cluster and wakes the loop.
func (l *Launcher) trigger(cluster string) {
	l.dirtyMu.Lock()
	l.dirty[cluster] = true
	l.dirtyMu.Unlock()
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// loop reconciles on every watch event, and each second until every cluster's informers have synced: an event
// that arrived before its informer counted as synced may have found nothing to do.
func (l *Launcher) loop(ctx context.Context) {
	defer close(l.loopDone)
	ticker := time.NewTicker(syncPeriod)
	defer ticker.Stop()
	tick := ticker.C
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.kick:
		case <-tick:
		}
		l.dirtyMu.Lock()
		dirty := l.dirty
		l.dirty = map[string]bool{}
		l.dirtyMu.Unlock()
		if l.reconcile(ctx, dirty) && tick != nil {
			ticker.Stop()
			tick = nil
		}
	}
}

// reconcile starts a worker for every replica of every selected Deployment, removes the workers of replicas that
// are gone, and wakes the others of the clusters with a watch event (dirty) to look at their Deployment, Secrets and
// ConfigMaps again (they also look each second by themselves). It reports whether every cluster's informers have
// synced.
func (l *Launcher) reconcile(ctx context.Context, dirty map[string]bool) (synced bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	synced = true
	for _, c := range l.clusters {
		if !c.hasSynced() {
			synced = false
			continue // its pods stay as they are until its view is complete
		}
		want := map[podKey]bool{}
		for _, d := range c.selected() {
			for i := range replicas(d) {
				want[podKey{cluster: c.name, namespace: d.Namespace, deployment: d.Name, index: i}] = true
			}
		}
		for key, w := range l.pods {
			if key.cluster == c.name && !want[key] {
				w.remove()
				delete(l.pods, key)
			}
		}
		for key := range want {
			if _, ok := l.pods[key]; ok {
				continue
			}
			var after <-chan struct{}
			if prev := l.last[key]; prev != nil {
				after = prev.finished
			}
			w := newPodWorker(l, c, key, after)
			l.pods[key], l.last[key] = w, w
			l.workers.Add(1)
			go w.run(ctx)
		}
	}
	for key, w := range l.pods {
		if dirty[key.cluster] {
			w.kick()
		}
	}
	return synced
}

func (l *Launcher) addError(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, err)
}

func (l *Launcher) logf(format string, a ...any) {
	l.logMu.Lock()
	defer l.logMu.Unlock()
	fmt.Fprintf(l.opts.Log, "%s launcher: %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, a...))
}
