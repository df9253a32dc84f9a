package launcher

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testenv"
)

const (
	// syncPeriod is how often a pod is looked at without an event: back-off expiry, token renewal, retries.
	syncPeriod = time.Second
	// Restart back-off of a process that exits, doubling up to maxBackoff and reset after backoffReset of running.
	// Shorter than the kubelet's 10 s to 5 min: this is a development environment.
	initialBackoff = time.Second
	maxBackoff     = 30 * time.Second
	backoffReset   = time.Minute
	// defaultGrace is a pod's terminationGracePeriodSeconds when the template leaves it unset.
	defaultGrace = 30 * time.Second
)

// PodStatus is one "pod": a replica of a Deployment, run as a process.
type PodStatus struct {
	Cluster    string // Target.Name
	Namespace  string
	Deployment string
	// Name is <deployment>-<replica index>; it is also the program's --server-id or --agent-id.
	Name    string
	Running bool
	PID     int
	// Restarts counts the times the process exited by itself (each exit is followed by a restart with back-off).
	// Restarts the launcher makes on a pod template change are rollouts, not counted here.
	Restarts   int
	LastExit   string // how it last exited by itself, e.g. "exit status 1" or "signal: killed"; "" if never
	LastExitAt time.Time
	StartedAt  time.Time
	// Waiting says why the process is not running (a missing Secret or ConfigMap, back-off, an unsupported template).
	Waiting string
	// Ports maps each rendered listening port the launcher moved (it was taken) to the loopback port used.
	Ports map[int32]int32
	// Command is the argv of the current (or last) process.
	Command []string
	// TemplateHash identifies the pod template the process runs.
	TemplateHash string
	Log          string
}

// podKey identifies a replica of a Deployment of one control plane.
type podKey struct {
	cluster, namespace, deployment string
	index                          int
}

func (k podKey) name() string { return k.deployment + "-" + strconv.Itoa(k.index) }

// id names the pod's folder and log, <cluster>_<namespace>_<pod>, as the kubelet names pod log folders.
func (k podKey) id() string { return k.cluster + "_" + k.namespace + "_" + k.name() }

// podWorker runs one pod, like the kubelet's pod worker: it materialises the volumes, starts the process, rewrites
// the files when a Secret or ConfigMap changes, restarts the process when it exits (with back-off) or when the pod
// template changes, and stops it when the pod goes away.
type podWorker struct {
	key          podKey
	l            *Launcher
	c            *cluster
	dir, logPath string
	after        <-chan struct{} // closed when the previous worker of this pod has finished
	wake         chan struct{}
	removed      chan struct{}
	removeOnce   sync.Once
	finished     chan struct{}

	// Owned by run.
	proc    *testenv.Process
	grace   time.Duration
	written map[string]string // mount path -> hash of the files on disk
	// writtenFrom is, by mount path, the template and Secret (or ConfigMap) version the files were last checked
	// against, so an unchanged object is not read and hashed again each second.
	writtenFrom map[string]string
	hashed      hashedTemplate // the Deployment generation whose template hash is known
	token       *serviceAccountToken
	backoff     time.Duration
	nextStart   time.Time
	lastWait    string
	lastHash    string // the template the last process was started from

	mu     sync.Mutex
	status PodStatus
}

func newPodWorker(l *Launcher, c *cluster, key podKey, after <-chan struct{}) *podWorker {
	w := &podWorker{
		key: key, l: l, c: c, after: after,
		dir:         filepath.Join(l.opts.WorkDir, key.id()),
		logPath:     filepath.Join(l.opts.WorkDir, key.id()+".log"),
		wake:        make(chan struct{}, 1),
		removed:     make(chan struct{}),
		finished:    make(chan struct{}),
		grace:       defaultGrace,
		written:     map[string]string{},
		writtenFrom: map[string]string{},
	}
	w.status = PodStatus{Cluster: key.cluster, Namespace: key.namespace, Deployment: key.deployment, Name: key.name(),
		Waiting: "not started yet", Log: w.logPath}
	return w
}

func (w *podWorker) kick() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *podWorker) remove() { w.removeOnce.Do(func() { close(w.removed) }) }

func (w *podWorker) snapshot() PodStatus {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.status
	s.Ports = make(map[int32]int32, len(w.status.Ports))
	for k, v := range w.status.Ports {
		s.Ports[k] = v
	}
	s.Command = append([]string(nil), w.status.Command...)
	return s
}

func (w *podWorker) update(f func(*PodStatus)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	f(&w.status)
}

func (w *podWorker) logf(format string, a ...any) {
	w.l.logf("%s/%s/%s: %s", w.key.cluster, w.key.namespace, w.key.name(), fmt.Sprintf(format, a...))
}

func (w *podWorker) run(ctx context.Context) {
	defer w.l.workers.Done()
	defer close(w.finished)
	if w.after != nil {
		<-w.after // the previous pod of this name has stopped and released its files and ports
	}
	ticker := time.NewTicker(syncPeriod)
	defer ticker.Stop()
	for {
		select {
		case <-w.removed:
		default:
			if ctx.Err() == nil {
				w.sync(ctx)
			}
		}
		var exited <-chan struct{}
		if w.proc != nil {
			exited = w.proc.Done()
		}
		var backoff <-chan time.Time
		var timer *time.Timer
		if wait := time.Until(w.nextStart); w.proc == nil && wait > 0 {
			timer = time.NewTimer(wait)
			backoff = timer.C
		}
		select {
		case <-ctx.Done():
			w.terminate("the launcher is stopping")
			return
		case <-w.removed:
			w.terminate("the pod is gone")
			return
		case <-w.wake:
		case <-ticker.C:
		case <-exited:
		case <-backoff:
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// sync brings the pod in line with its Deployment, Secrets and ConfigMaps.
func (w *podWorker) sync(ctx context.Context) {
	if w.proc != nil {
		if done, _ := w.proc.Exited(); done {
			w.recordExit()
		}
	}
	d, ok := w.c.deployment(w.key.namespace, w.key.deployment)
	if !ok || w.key.index >= replicas(d) {
		return // the launcher removes this pod
	}
	tmpl := &d.Spec.Template
	hash := w.templateHash(d)
	if w.proc != nil && w.lastHash != hash {
		w.logf("Pod template changed (%s -> %s): restarting, as a rollout would", w.lastHash, hash)
		w.stopProcess()
	}
	if w.lastHash != hash {
		w.backoff, w.nextStart = 0, time.Time{} // a new template is a new pod: no back-off inherited
	}

	volumesErr := w.syncVolumes(tmpl, hash)
	if w.proc != nil {
		// A running pod keeps its files when a Secret or ConfigMap it requires disappears, as with the kubelet (an
		// optional one that disappears empties its folder instead, as the kubelet does too).
		if volumesErr != nil {
			w.wait("keeping the files last written: " + volumesErr.Error())
		}
		if w.token != nil && w.token.due(time.Now()) {
			if err := w.syncToken(ctx, &tmpl.Spec); err != nil {
				w.logf("Renewing the ServiceAccount token failed, will retry: %v", err)
			}
		}
		return
	}
	if volumesErr != nil {
		w.wait(volumesErr.Error())
		return
	}
	if now := time.Now(); now.Before(w.nextStart) {
		w.wait(fmt.Sprintf("back-off %s restarting the exited process (%s)", w.backoff, w.snapshot().LastExit))
		return
	}
	cl, err := w.commandLine(ctx, tmpl)
	if err != nil {
		w.wait(err.Error())
		return
	}
	w.start(cl, hash, tmpl)
}

// commandLine prepares what the process needs from the cluster (token, ports) and builds its command line.
func (w *podWorker) commandLine(ctx context.Context, tmpl *corev1.PodTemplateSpec) (*commandLine, error) {
	kubeconfig := ""
	mounts, err := w.c.mountsToken(ctx, w.key.namespace, &tmpl.Spec)
	if err != nil {
		return nil, err
	}
	if mounts {
		if w.token.due(time.Now()) {
			if err := w.syncToken(ctx, &tmpl.Spec); err != nil {
				return nil, err
			}
		}
		kubeconfig = filepath.Join(w.dir, "in-cluster.kubeconfig")
		saDir := localPath(w.dir, serviceAccountMount)
		raw, err := inClusterKubeconfig(w.c.server, filepath.Join(saDir, "ca.crt"), filepath.Join(saDir, "token"))
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(kubeconfig, raw, 0o600); err != nil {
			return nil, err
		}
	} else {
		w.token = nil
	}
	return buildCommandLine(tmpl, podContext{
		Name: w.key.name(), Namespace: w.key.namespace, Dir: w.dir,
		APIServer: w.c.apiServer, Kubeconfig: kubeconfig, Addresses: w.l.opts.Addresses, Binaries: w.l.opts.Binaries,
		Secret: func(name string) (*corev1.Secret, bool) { return w.c.secret(w.key.namespace, name) },
		Port: func(rendered int32) (int32, error) {
			return w.l.ports.take(w.key.id()+"/"+strconv.Itoa(int(rendered)), rendered)
		},
	})
}

// syncToken requests a ServiceAccount token and writes the token volume (token, ca.crt, namespace) atomically.
func (w *podWorker) syncToken(ctx context.Context, spec *corev1.PodSpec) error {
	if len(w.c.caData) == 0 {
		return fmt.Errorf("no CA for the kube-apiserver of %s: the in-cluster configuration needs one", w.c.name)
	}
	token, err := w.c.requestToken(ctx, w.key.namespace, spec)
	if err != nil {
		return err
	}
	payload := volumePayload{"token": []byte(token.token), "ca.crt": w.c.caData, "namespace": []byte(w.key.namespace)}
	if err := writeAtomic(localPath(w.dir, serviceAccountMount), payload); err != nil {
		return fmt.Errorf("write the ServiceAccount token: %w", err)
	}
	w.token = token
	return nil
}

// templateHash is the Deployment's pod template hash, computed again only when its spec changed (its generation).
func (w *podWorker) templateHash(d *appsv1.Deployment) string {
	if d.Generation == 0 || d.UID != w.hashed.uid || d.Generation != w.hashed.generation {
		w.hashed = hashedTemplate{uid: d.UID, generation: d.Generation, hash: templateHash(&d.Spec.Template)}
	}
	return w.hashed.hash
}

type hashedTemplate struct {
	uid        types.UID
	generation int64
	hash       string
}

// syncVolumes writes every mounted Secret and ConfigMap whose content changed since it was last written; an object
// whose version is the one last checked, under the same template (hash), is skipped. The informers' watch events wake
// the worker, so a changed object reaches the files within an event, as the kubelet refreshes these volumes.
func (w *podWorker) syncVolumes(tmpl *corev1.PodTemplateSpec, templateHash string) error {
	volumes := map[string]*corev1.Volume{}
	for i := range tmpl.Spec.Volumes {
		volumes[tmpl.Spec.Volumes[i].Name] = &tmpl.Spec.Volumes[i]
	}
	var errs []error
	for _, c := range tmpl.Spec.Containers {
		for _, m := range c.VolumeMounts {
			v, ok := volumes[m.Name]
			if !ok {
				continue // buildCommandLine reports it
			}
			var (
				object  metav1.Object // the Secret or ConfigMap the files are made from; nil when missing
				what    string        // the object, for the log
				payload volumePayload
				err     error
			)
			switch {
			case v.Secret != nil:
				secret, found := w.c.secret(w.key.namespace, v.Secret.SecretName)
				what, object = "Secret "+v.Secret.SecretName, foundOrNil(secret, found)
				payload, err = secretPayload(v.Secret, secret, w.key.namespace)
			case v.ConfigMap != nil:
				cm, found := w.c.configMap(w.key.namespace, v.ConfigMap.Name)
				what, object = "ConfigMap "+v.ConfigMap.Name, foundOrNil(cm, found)
				payload, err = configMapPayload(v.ConfigMap, cm, w.key.namespace)
			case v.EmptyDir != nil:
				if _, done := w.written[m.MountPath]; done {
					continue // an emptyDir is the program's own: created once, never rewritten
				}
				if err := os.MkdirAll(localPath(w.dir, m.MountPath), 0o700); err != nil {
					errs = append(errs, err)
					continue
				}
				w.written[m.MountPath] = "emptyDir"
				continue
			default:
				continue // buildCommandLine reports it
			}
			source := objectVersion(templateHash, object) // "" when missing
			if source != "" && w.writtenFrom[m.MountPath] == source {
				continue
			}
			if err != nil {
				errs = append(errs, err)
				continue
			}
			hash := payload.hash()
			if w.written[m.MountPath] == hash {
				w.writtenFrom[m.MountPath] = source
				continue
			}
			if err := writeAtomic(localPath(w.dir, m.MountPath), payload); err != nil {
				errs = append(errs, fmt.Errorf("write volume %s at %s: %w", m.Name, m.MountPath, err))
				continue
			}
			if _, before := w.written[m.MountPath]; before && w.proc != nil {
				w.logf("%s changed: rewrote %s (the process reloads it; no restart)", what, m.MountPath)
			}
			w.written[m.MountPath] = hash
			w.writtenFrom[m.MountPath] = source
		}
	}
	return errors.Join(errs...)
}

// objectVersion identifies the version of obj a volume is written from under a template; "" when obj is nil or has
// no version.
func objectVersion(templateHash string, obj metav1.Object) string {
	if obj == nil || obj.GetResourceVersion() == "" {
		return ""
	}
	return templateHash + "/" + string(obj.GetUID()) + "/" + obj.GetResourceVersion()
}

// foundOrNil is obj when found, else a nil interface (not a typed nil pointer).
func foundOrNil[T metav1.Object](obj T, found bool) metav1.Object {
	if !found {
		return nil
	}
	return obj
}

func (w *podWorker) start(cl *commandLine, hash string, tmpl *corev1.PodTemplateSpec) {
	w.grace = defaultGrace
	if g := tmpl.Spec.TerminationGracePeriodSeconds; g != nil {
		w.grace = time.Duration(*g) * time.Second
	}
	argv := append([]string{cl.Path}, cl.Args...)
	w.lastHash = hash
	p, err := startProcess(cl, w.dir, w.logPath)
	if err != nil {
		appendLog(w.logPath, fmt.Sprintf("--- launcher: start failed: %v\n", err))
		// As a container that cannot start: counted as an exit and retried with back-off.
		w.exited(0, fmt.Sprintf("start failed: %v", err))
		w.update(func(s *PodStatus) { s.Command = argv })
		return
	}
	w.proc = p
	w.lastWait = ""
	w.logf("Started pid %d (template %s)", p.Pid(), hash)
	w.update(func(s *PodStatus) {
		s.Running, s.PID, s.StartedAt, s.Waiting = true, p.Pid(), p.StartedAt(), ""
		s.Command, s.TemplateHash = argv, hash
		s.Ports = map[int32]int32{}
		for k, v := range cl.Ports {
			s.Ports[k] = v
		}
	})
}

// recordExit counts a process that exited by itself and schedules its restart.
func (w *podWorker) recordExit() {
	p := w.proc
	w.proc = nil
	w.exited(time.Since(p.StartedAt()), p.ExitDescription())
}

func (w *podWorker) exited(ran time.Duration, how string) {
	if ran >= backoffReset || w.backoff == 0 {
		w.backoff = initialBackoff
	} else {
		w.backoff = min(2*w.backoff, maxBackoff)
	}
	now := time.Now()
	w.nextStart = now.Add(w.backoff)
	w.logf("Exited after %s (%s); restarting in %s", ran.Round(time.Millisecond), how, w.backoff)
	w.update(func(s *PodStatus) {
		s.Running, s.PID = false, 0
		s.Restarts++
		s.LastExit, s.LastExitAt = how, now
		s.Waiting = "back-off restarting the exited process"
	})
}

// stopProcess ends the process on the launcher's initiative (rollout, removal, Stop): not counted as an exit.
func (w *podWorker) stopProcess() {
	if w.proc == nil {
		return
	}
	pid := w.proc.Pid()
	if w.proc.Terminate(w.grace) {
		w.logf("Pid %d did not stop within %s of SIGTERM: killed", pid, w.grace)
	} else {
		w.logf("Pid %d stopped", pid)
	}
	w.proc = nil
	w.update(func(s *PodStatus) { s.Running, s.PID, s.Waiting = false, 0, "stopped" })
}

// terminate stops the process and removes the pod's files (its log stays).
func (w *podWorker) terminate(reason string) {
	if w.proc != nil {
		if done, _ := w.proc.Exited(); done {
			w.recordExit()
		}
	}
	w.stopProcess()
	w.l.ports.release(w.key.id())
	if err := os.RemoveAll(w.dir); err != nil {
		w.l.addError(fmt.Errorf("remove the files of pod %s: %w", w.key.id(), err))
	}
	w.update(func(s *PodStatus) { s.Running, s.PID, s.Waiting = false, 0, reason })
}

// wait records why the process is not running, or why its files are not updated (logged when the reason changes).
func (w *podWorker) wait(reason string) {
	if reason != w.lastWait {
		if w.proc == nil {
			w.logf("Waiting: %s", reason)
		} else {
			w.logf("Running, but %s", reason)
		}
		w.lastWait = reason
	}
	if w.proc == nil {
		w.update(func(s *PodStatus) { s.Waiting = reason })
	}
}

// templateHash identifies a pod template, like the pod-template-hash of a ReplicaSet.
func templateHash(tmpl *corev1.PodTemplateSpec) string {
	raw, _ := json.Marshal(tmpl) // a PodTemplateSpec always encodes
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:])[:10]
}

// appendLog adds a line of the launcher's own to a pod's log.
func appendLog(path, line string) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return // the launcher's log says it too
	}
	defer f.Close()
	_, _ = f.WriteString(line)
}
