//go:build e2e

package e2e

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/certs"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/render"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/kubeclient"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/localsystem"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/localsystem/realcluster"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/soak"
)

// The soak's kinds of fault.
const (
	faultServerDelete  = "proxy-server pod delete"
	faultServerKill    = "proxy-server SIGKILL"
	faultAgentDelete   = "agent pod delete"
	faultAgentKill     = "agent SIGKILL"
	faultServerRoll    = "proxy-server rolling update"
	faultAgentRoll     = "agent rolling update"
	faultManagerDelete = "manager pod delete"
	faultSquidRestart  = "squid restart"
	faultLeafRotation  = "leaf rotation"
	faultSelfSignedCA  = "self-signed CA rotation"
	faultProvidedCA    = "Provided CA rotation"
	faultNetworkCut    = "network cut"
)

// soakKinds are the faults the soak draws from. Each kind is a group of its own, so never overlaps with itself, but
// the two CA rotations share one: a rollover runs alone.
var soakKinds = []soak.Kind{
	{Name: faultServerDelete}, {Name: faultServerKill}, {Name: faultAgentDelete}, {Name: faultAgentKill},
	{Name: faultServerRoll}, {Name: faultAgentRoll}, {Name: faultManagerDelete}, {Name: faultSquidRestart},
	{Name: faultLeafRotation}, {Name: faultSelfSignedCA, Group: "CA rotation"}, {Name: faultProvidedCA, Group: "CA rotation"},
	{Name: faultNetworkCut},
}

const (
	// soakRecovery is how long a fault waits for the system to recover from it; soakCARecovery for a CA rotation,
	// which also waits for the agents' new certificates (klusterlet CSRs) and the rollover grace.
	soakRecovery   = 5 * time.Minute
	soakCARecovery = 10 * time.Minute
	// minCut and maxCut bound a network cut, drawn in whole seconds.
	minCut, maxCut = 5, 30
	// soakProvidedCASecret holds the CA of the Provided CA rotation, in the operator's namespace.
	soakProvidedCASecret = "soak-provided-ca"
	// agentRollArg is the agent argument the agent rolling update adds or removes: more logging, nothing else.
	agentRollArg = "--v=1"
)

// soakSystem is what the faults act on, read once on the spec's goroutine: each cluster's client, node and agent
// namespace, and the agents' arguments at the start.
type soakSystem struct {
	managed   map[string]client.Client
	nodes     map[string]*realcluster.Cluster
	agentNS   map[string]string
	agentArgs []string
}

// newSoakSystem reads what the faults act on.
func newSoakSystem() *soakSystem {
	GinkgoHelper()
	s := &soakSystem{managed: map[string]client.Client{}, nodes: map[string]*realcluster.Cluster{}, agentNS: map[string]string{}}
	for _, c := range sys.Managed {
		s.managed[c.Name()] = managedClient(c.Name())
		s.nodes[c.Name()] = c
		s.agentNS[c.Name()] = agentNamespace(Default, c.Name())
	}
	s.agentArgs = soakMPC(Default).Spec.ProxyAgent.AdditionalArgs
	return s
}

// inject injects one fault of kind, drawing its target with r, and waits until the system has recovered: the kind's
// own condition and every agent on every replica. It writes to the spec's output as the fault starts, with its
// target, and as it is over.
func (s *soakSystem) inject(ctx context.Context, kind soak.Kind, r *rand.Rand) (f soak.Fault) {
	f = soak.Fault{Kind: kind.Name, Start: time.Now()}
	started := sync.OnceFunc(func() { progress("fault %s (%s) started", f.Kind, f.Target) })
	defer func() {
		if e := recover(); e != nil {
			f.InjectError, f.End = fmt.Sprintf("the fault's code panicked: %v", e), time.Now()
		}
		started()
		progressFaultOver(f)
	}()
	within := soakRecovery
	var recovered func(Gomega)
	var err error
	switch kind.Name {
	case faultServerDelete:
		err = s.deleteProxyServer(ctx, r, &f)
	case faultServerKill:
		recovered, err = s.killProxyServer(ctx, r, &f)
	case faultAgentDelete:
		recovered, err = s.deleteAgent(ctx, r, &f)
	case faultAgentKill:
		recovered, err = s.killAgent(ctx, r, &f)
	case faultServerRoll:
		recovered, err = s.rollProxyServers(ctx, &f)
	case faultAgentRoll:
		recovered, err = s.rollAgents(ctx, &f)
	case faultManagerDelete:
		recovered, err = s.deleteManager(ctx, r, &f)
	case faultSquidRestart:
		err = s.restartSquid(&f)
	case faultLeafRotation:
		recovered, err = s.rotateLeaf(ctx, r, &f)
	case faultSelfSignedCA:
		recovered, err = s.rotateSelfSignedCA(ctx, &f)
		within = soakCARecovery
	case faultProvidedCA:
		recovered, err = s.rotateProvidedCA(ctx, r, &f)
		within = soakCARecovery
	case faultNetworkCut:
		err = s.cutNetwork(ctx, r, &f, started)
	default:
		err = fmt.Errorf("no fault of kind %q", kind.Name)
	}
	started()
	if f.Restored.IsZero() {
		f.Restored = time.Now()
	}
	if err != nil {
		f.InjectError = err.Error()
	} else {
		f.RecoveryError = awaitRecovery(within, recovered)
	}
	f.End = time.Now()
	return f
}

// progressFaultOver writes to the spec's output how fault f ended: its recovery time, or its error.
func progressFaultOver(f soak.Fault) {
	since := f.End.Sub(f.Start).Round(100 * time.Millisecond)
	switch {
	case f.InjectError != "":
		progress("fault %s (%s) not injected: %s", f.Kind, f.Target, f.InjectError)
	case f.RecoveryError != "":
		progress("fault %s (%s) not recovered, %s after its start: %s", f.Kind, f.Target, since, f.RecoveryError)
	default:
		progress("fault %s (%s) recovered %s after its cause was over, %s after its start", f.Kind, f.Target,
			f.Recovery().Round(100*time.Millisecond), since)
	}
}

// restore brings the signer and the agents' arguments back to what they were at the start, with the faults that
// change them, so that the soak ends as it began.
func (s *soakSystem) restore(ctx context.Context, r *rand.Rand) []soak.Fault {
	var out []soak.Fault
	mpc := soakMPC(Default)
	if mpc.Spec.Authentication.Signer.Type == proxyv1alpha1.Provided {
		out = append(out, s.inject(ctx, soak.Kind{Name: faultSelfSignedCA}, r))
	}
	if !slices.Equal(mpc.Spec.ProxyAgent.AdditionalArgs, s.agentArgs) {
		out = append(out, s.inject(ctx, soak.Kind{Name: faultAgentRoll}, r))
	}
	if soakMPC(Default).Spec.Authentication.Signer.Type == proxyv1alpha1.SelfSigned {
		// The Provided CA's Secret is of no use once the signer is SelfSigned again.
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: localsystem.Namespace, Name: soakProvidedCASecret}}
		Expect(client.IgnoreNotFound(sys.HubClient.Delete(ctx, secret))).To(Succeed())
	}
	return out
}

// awaitRecovery waits up to within for check (nil: nothing of its own) and for every agent on every replica, and
// returns what was still missing when it gave up; "" once recovered.
func awaitRecovery(within time.Duration, check func(Gomega)) string {
	var missing string
	g := NewGomega(func(message string, _ ...int) { missing = message })
	g.Eventually(func(g Gomega) {
		if check != nil {
			check(g)
		}
		agentsOnEveryReplica(g, 3)
	}).WithTimeout(within).WithPolling(2 * time.Second).Should(Succeed())
	return missing
}

// runningPods are the pods in namespace matching labels that are not being deleted, sorted by name.
func runningPods(ctx context.Context, c client.Client, namespace string, labels map[string]string) ([]corev1.Pod, error) {
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, client.InNamespace(namespace), client.MatchingLabels(labels)); err != nil {
		return nil, err
	}
	var out []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b corev1.Pod) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
}

// onTarget draws a target with r from what candidates lists and acts on it, up to three times: a fault beside this
// one may have replaced the drawn target meanwhile. It returns the target acted on, or the last error.
func onTarget[T any](r *rand.Rand, what string, candidates func() ([]T, error), act func(T) error) (T, error) {
	var target T
	var err error
	for range 3 {
		var all []T
		if all, err = candidates(); err != nil {
			continue
		}
		if len(all) == 0 {
			err = errors.New("no " + what)
			continue
		}
		target = all[r.IntN(len(all))]
		if err = act(target); err == nil {
			return target, nil
		}
	}
	return target, fmt.Errorf("%s: %w", what, err)
}

// proxyServerPodList lists the running proxy-server pods.
func proxyServerPodList(ctx context.Context) func() ([]corev1.Pod, error) {
	return func() ([]corev1.Pod, error) {
		return runningPods(ctx, sys.HubClient, localsystem.Namespace, proxyServerLabels)
	}
}

// deleteProxyServer deletes a proxy-server pod; its replacement turns Ready only once it holds every cluster, which
// agentsOnEveryReplica then sees.
func (s *soakSystem) deleteProxyServer(ctx context.Context, r *rand.Rand, f *soak.Fault) error {
	victim, err := onTarget(r, "proxy-server pod", proxyServerPodList(ctx), func(p corev1.Pod) error {
		return sys.HubClient.Delete(ctx, &p, client.Preconditions{UID: &p.UID})
	})
	f.Target = victim.Name
	return err
}

// killProxyServer SIGKILLs the process of a proxy-server pod; it has recovered once its container restarted and is
// Ready again (or another fault replaced the pod).
func (s *soakSystem) killProxyServer(ctx context.Context, r *rand.Rand, f *soak.Fault) (func(Gomega), error) {
	var restarts int32
	victim, err := onTarget(r, "proxy-server pod with a running container", withContainer(proxyServerPodList(ctx)), func(p corev1.Pod) error {
		restarts = p.Status.ContainerStatuses[0].RestartCount
		return sys.Hub.KillContainer(ctx, p.Status.ContainerStatuses[0].ContainerID, "SIGKILL")
	})
	f.Target = victim.Name
	return restarted(sys.HubClient, victim, restarts), err
}

// withContainer keeps, of the pods list gives, those whose first container runs.
func withContainer(list func() ([]corev1.Pod, error)) func() ([]corev1.Pod, error) {
	return func() ([]corev1.Pod, error) {
		pods, err := list()
		return slices.DeleteFunc(pods, func(p corev1.Pod) bool {
			return len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].ContainerID == "" || p.Status.ContainerStatuses[0].State.Running == nil
		}), err
	}
}

// restarted asserts that pod's first container restarted since it had restarts and is Ready, unless the pod was
// replaced.
func restarted(c client.Client, pod corev1.Pod, restarts int32) func(Gomega) {
	return func(g Gomega) {
		live := &corev1.Pod{}
		err := c.Get(ctx(), client.ObjectKeyFromObject(&pod), live)
		if apierrors.IsNotFound(err) || err == nil && live.UID != pod.UID {
			return
		}
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(live.Status.ContainerStatuses).NotTo(BeEmpty())
		status := live.Status.ContainerStatuses[0]
		g.Expect(status.RestartCount).To(BeNumerically(">", restarts), "pod %s restarted its container", pod.Name)
		g.Expect(status.Ready).To(BeTrue(), "pod %s is Ready again", pod.Name)
	}
}

// agentPodList lists the running agent pods of cluster.
func (s *soakSystem) agentPodList(ctx context.Context, cluster string) func() ([]corev1.Pod, error) {
	return func() ([]corev1.Pod, error) {
		return runningPods(ctx, s.managed[cluster], s.agentNS[cluster], agentLabels)
	}
}

// drawCluster draws a managed cluster with r.
func drawCluster(r *rand.Rand) string {
	names := clusterNames()
	return names[r.IntN(len(names))]
}

// deleteAgent deletes an agent pod of a cluster; it has recovered once no replica holds the deleted agent any more
// (a draining agent is still listed) and each holds three of the cluster's.
func (s *soakSystem) deleteAgent(ctx context.Context, r *rand.Rand, f *soak.Fault) (func(Gomega), error) {
	cluster := drawCluster(r)
	f.Cluster = cluster
	victim, err := onTarget(r, cluster+" agent pod", s.agentPodList(ctx, cluster), func(p corev1.Pod) error {
		return s.managed[cluster].Delete(ctx, &p, client.Preconditions{UID: &p.UID})
	})
	f.Target = cluster + "/" + victim.Name
	return func(g Gomega) {
		for replica, agents := range replicaAgents(g) {
			g.Expect(agents[cluster]).NotTo(ContainElement(victim.Name), "replica %s still holds the deleted agent", replica)
		}
	}, err
}

// killAgent SIGKILLs the process of an agent pod of a cluster, on the cluster's node; it has recovered once its
// container restarted and is Ready again (or another fault replaced the pod).
func (s *soakSystem) killAgent(ctx context.Context, r *rand.Rand, f *soak.Fault) (func(Gomega), error) {
	cluster := drawCluster(r)
	f.Cluster = cluster
	var restarts int32
	victim, err := onTarget(r, cluster+" agent pod with a running container", withContainer(s.agentPodList(ctx, cluster)), func(p corev1.Pod) error {
		restarts = p.Status.ContainerStatuses[0].RestartCount
		return s.nodes[cluster].KillContainer(ctx, p.Status.ContainerStatuses[0].ContainerID, "SIGKILL")
	})
	f.Target = cluster + "/" + victim.Name
	return restarted(s.managed[cluster], victim, restarts), err
}

// rollProxyServers restarts the proxy-server Deployment as 'kubectl rollout restart' does, which the operator leaves
// alone (its restartedAt annotation); it has recovered once the Deployment has rolled out and no replica is one of
// before.
func (s *soakSystem) rollProxyServers(ctx context.Context, f *soak.Fault) (func(Gomega), error) {
	before, err := runningPods(ctx, sys.HubClient, localsystem.Namespace, proxyServerLabels)
	if err != nil {
		return nil, err
	}
	f.Target = "deployment/" + proxyv1alpha1.DefaultConfigurationName
	if _, err := kubeclient.Kubectl(sys.Hub.Kubeconfig, "rollout", "restart", "-n", localsystem.Namespace, f.Target); err != nil {
		return nil, err
	}
	return func(g Gomega) {
		d := &appsv1.Deployment{}
		g.Expect(sys.HubClient.Get(ctx, types(localsystem.Namespace, proxyv1alpha1.DefaultConfigurationName), d)).To(Succeed())
		g.Expect(deploymentRolledOut(d)).To(BeTrue(), "the proxy-server Deployment rolled out: %+v", d.Status)
		now, err := runningPods(ctx, sys.HubClient, localsystem.Namespace, proxyServerLabels)
		g.Expect(err).NotTo(HaveOccurred())
		for _, old := range before {
			g.Expect(now).NotTo(ContainElement(HaveField("ObjectMeta.UID", old.UID)), "replica %s is still there", old.Name)
		}
	}, nil
}

// soakMPC reads the ManagedProxyConfiguration.
func soakMPC(g Gomega) *proxyv1alpha1.ManagedProxyConfiguration {
	mpc := &proxyv1alpha1.ManagedProxyConfiguration{}
	g.Expect(sys.HubClient.Get(ctx(), types("", proxyv1alpha1.DefaultConfigurationName), mpc)).To(Succeed())
	return mpc
}

// updateMPC changes the ManagedProxyConfiguration, reading it again on a conflict: the faults that change it may run
// side by side.
func updateMPC(ctx context.Context, change func(*proxyv1alpha1.ManagedProxyConfiguration)) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		mpc := &proxyv1alpha1.ManagedProxyConfiguration{}
		if err := sys.HubClient.Get(ctx, types("", proxyv1alpha1.DefaultConfigurationName), mpc); err != nil {
			return err
		}
		change(mpc)
		return sys.HubClient.Update(ctx, mpc)
	})
}

// rollAgents adds agentRollArg to the agents' spec.proxyAgent.additionalArgs, or removes it, which rolls the agents
// of every cluster (the operator renders their ManifestWork from it); it has recovered once every cluster's agent
// Deployment runs the new arguments and every replica holds exactly its new agents.
func (s *soakSystem) rollAgents(ctx context.Context, f *soak.Fault) (func(Gomega), error) {
	var with bool
	err := updateMPC(ctx, func(mpc *proxyv1alpha1.ManagedProxyConfiguration) {
		args := mpc.Spec.ProxyAgent.AdditionalArgs
		with = !slices.Contains(args, agentRollArg)
		if with {
			mpc.Spec.ProxyAgent.AdditionalArgs = append(args, agentRollArg)
		} else {
			mpc.Spec.ProxyAgent.AdditionalArgs = slices.DeleteFunc(args, func(a string) bool { return a == agentRollArg })
		}
	})
	f.Target = "spec.proxyAgent.additionalArgs without " + agentRollArg
	if with {
		f.Target = "spec.proxyAgent.additionalArgs with " + agentRollArg
	}
	return func(g Gomega) {
		answers := replicaAgents(g)
		for _, cluster := range clusterNames() {
			d := &appsv1.Deployment{}
			g.Expect(s.managed[cluster].Get(ctx, types(s.agentNS[cluster], render.AgentDeploymentName), d)).To(Succeed())
			args := d.Spec.Template.Spec.Containers[0].Args
			g.Expect(slices.Contains(args, agentRollArg)).To(Equal(with), "%s's agent arguments: %v", cluster, args)
			g.Expect(deploymentRolledOut(d)).To(BeTrue(), "%s's agents rolled out: %+v", cluster, d.Status)
			onlyCurrentAgents(g, answers, cluster)
		}
	}, err
}

// deleteManager deletes the manager's pod; it has recovered once a new one is Ready and holds the leader-election
// Lease, and every cluster is Available.
func (s *soakSystem) deleteManager(ctx context.Context, r *rand.Rand, f *soak.Fault) (func(Gomega), error) {
	victim, err := onTarget(r, "manager pod", func() ([]corev1.Pod, error) {
		return runningPods(ctx, sys.HubClient, localsystem.Namespace, managerLabels)
	}, func(p corev1.Pod) error { return sys.HubClient.Delete(ctx, &p, client.Preconditions{UID: &p.UID}) })
	f.Target = victim.Name
	return func(g Gomega) {
		pods, err := runningPods(ctx, sys.HubClient, localsystem.Namespace, managerLabels)
		g.Expect(err).NotTo(HaveOccurred())
		lease := &coordinationv1.Lease{}
		g.Expect(sys.HubClient.Get(ctx, types(localsystem.Namespace, leaderLease), lease)).To(Succeed())
		holder := ptr.Deref(lease.Spec.HolderIdentity, "")
		g.Expect(pods).To(ContainElement(And(
			WithTransform(func(p corev1.Pod) bool { return p.UID != victim.UID && strings.HasPrefix(holder, p.Name+"_") }, BeTrue()),
			WithTransform(podIsReady, BeTrue()),
		)), "a new, Ready manager pod holds the Lease (held by %q)", holder)
		states, err := sys.States(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		for _, st := range states {
			g.Expect(st.Available).To(BeTrue(), "%s: %s", st.Name, st.Status)
		}
	}, err
}

func podIsReady(p corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// restartSquid stops and starts squid, cluster1's only route to the hub: every tunnel of cluster1 drops, and its
// agents come back through the restarted squid.
func (s *soakSystem) restartSquid(f *soak.Fault) error {
	f.Cluster, f.Target = localsystem.ProxiedCluster, "squid, "+localsystem.ProxiedCluster+"'s route"
	if err := sys.Squid.Stop(); err != nil {
		return err
	}
	var err error
	for range 5 {
		if err = sys.Squid.Start(); err == nil {
			return nil
		}
		time.Sleep(time.Second)
	}
	return fmt.Errorf("start squid again: %w", err)
}

// rotateLeaf deletes the Secret of one of the operator's ProxyCertificates, which the ProxyCertificate controller
// issues again; it has recovered once a new Secret holds a new certificate and the ProxyCertificate is Ready.
func (s *soakSystem) rotateLeaf(ctx context.Context, r *rand.Rand, f *soak.Fault) (func(Gomega), error) {
	var old corev1.Secret
	var serial string
	pc, err := onTarget(r, "ProxyCertificate", func() ([]proxyv1alpha1.ProxyCertificate, error) {
		list := &proxyv1alpha1.ProxyCertificateList{}
		err := sys.HubClient.List(ctx, list, client.InNamespace(localsystem.Namespace))
		slices.SortFunc(list.Items, func(a, b proxyv1alpha1.ProxyCertificate) int { return cmp.Compare(a.Name, b.Name) })
		return list.Items, err
	}, func(pc proxyv1alpha1.ProxyCertificate) error {
		if err := sys.HubClient.Get(ctx, types(pc.Namespace, pc.Spec.SecretName), &old); err != nil {
			return err
		}
		if serial = leafSerial(&old); serial == "" {
			return fmt.Errorf("secret %s holds no certificate", old.Name)
		}
		return sys.HubClient.Delete(ctx, &old, client.Preconditions{UID: &old.UID})
	})
	f.Target = "secret " + pc.Spec.SecretName
	return func(g Gomega) {
		live := &corev1.Secret{}
		g.Expect(sys.HubClient.Get(ctx, types(pc.Namespace, pc.Spec.SecretName), live)).To(Succeed())
		g.Expect(live.UID).NotTo(Equal(old.UID), "a new Secret")
		g.Expect(leafSerial(live)).NotTo(BeElementOf("", serial), "a new certificate")
		issued := &proxyv1alpha1.ProxyCertificate{}
		g.Expect(sys.HubClient.Get(ctx, client.ObjectKeyFromObject(&pc), issued)).To(Succeed())
		g.Expect(meta.IsStatusConditionTrue(issued.Status.Conditions, proxyv1alpha1.ConditionReady)).To(BeTrue(), "ProxyCertificate %s is Ready", pc.Name)
	}, err
}

// leafSerial is the serial number of the certificate in a TLS Secret; "" without one.
func leafSerial(s *corev1.Secret) string {
	chain, err := certs.ParseCertificates(s.Data[corev1.TLSCertKey])
	if err != nil || len(chain) == 0 {
		return ""
	}
	return chain[0].SerialNumber.Text(16)
}

// signerFingerprint is the fingerprint of the CA that signs now, as the ManagedProxyConfiguration reports it.
func signerFingerprint(mpc *proxyv1alpha1.ManagedProxyConfiguration) string {
	if mpc.Status.Signer == nil {
		return ""
	}
	return mpc.Status.Signer.CAFingerprint
}

// rotateSelfSignedCA asks for a new self-signed CA with the rotate-ca annotation, as the README does; when the
// signer is Provided, it sets it back to SelfSigned instead, which rolls over to a CA of the operator's own.
func (s *soakSystem) rotateSelfSignedCA(ctx context.Context, f *soak.Fault) (func(Gomega), error) {
	mpc := &proxyv1alpha1.ManagedProxyConfiguration{}
	if err := sys.HubClient.Get(ctx, types("", proxyv1alpha1.DefaultConfigurationName), mpc); err != nil {
		return nil, err
	}
	before := signerFingerprint(mpc)
	provided := mpc.Spec.Authentication.Signer.Type == proxyv1alpha1.Provided
	f.Target = "the " + proxyv1alpha1.RotateCAAnnotation + " annotation"
	if provided {
		f.Target = "the signer back to SelfSigned"
	}
	err := updateMPC(ctx, func(mpc *proxyv1alpha1.ManagedProxyConfiguration) {
		if provided {
			mpc.Spec.Authentication.Signer.Type, mpc.Spec.Authentication.Signer.Provided = proxyv1alpha1.SelfSigned, nil
			return
		}
		metav1.SetMetaDataAnnotation(&mpc.ObjectMeta, proxyv1alpha1.RotateCAAnnotation, strconv.FormatInt(time.Now().UnixNano(), 10))
	})
	return caRolledOver(ctx, before, ""), err
}

// rotateProvidedCA writes a new CA into the Secret soakProvidedCASecret and makes it the signer (type Provided), or, when
// it already is, rolls the Secret over to the new CA.
func (s *soakSystem) rotateProvidedCA(ctx context.Context, r *rand.Rand, f *soak.Fault) (func(Gomega), error) {
	mpc := &proxyv1alpha1.ManagedProxyConfiguration{}
	if err := sys.HubClient.Get(ctx, types("", proxyv1alpha1.DefaultConfigurationName), mpc); err != nil {
		return nil, err
	}
	before := signerFingerprint(mpc)
	ca, err := certs.NewCA(fmt.Sprintf("soak provided CA %08x", r.Uint32()), 365*24*time.Hour, time.Now())
	if err != nil {
		return nil, err
	}
	fingerprint := certs.Fingerprint(ca.Cert)
	f.Target = "secret " + soakProvidedCASecret + " with CA " + fingerprint
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: localsystem.Namespace, Name: soakProvidedCASecret}}
	if _, err := controllerutil.CreateOrUpdate(ctx, sys.HubClient, secret, func() error {
		secret.Data = map[string][]byte{"ca.crt": ca.CertPEM, "ca.key": ca.KeyPEM}
		return nil
	}); err != nil {
		return nil, err
	}
	err = updateMPC(ctx, func(mpc *proxyv1alpha1.ManagedProxyConfiguration) {
		mpc.Spec.Authentication.Signer.Type = proxyv1alpha1.Provided
		mpc.Spec.Authentication.Signer.Provided = &proxyv1alpha1.AuthenticationProvided{
			SecretRef: &proxyv1alpha1.SecretReference{Name: soakProvidedCASecret, Namespace: localsystem.Namespace}}
	})
	return caRolledOver(ctx, before, fingerprint), err
}

// caRolledOver asserts that a CA other than before (want, when it is set) signs, that the earlier ones left the
// bundle, that the configuration is Ready, and that every agent certificate and every ProxyCertificate's Secret is
// signed by it.
func caRolledOver(ctx context.Context, before, want string) func(Gomega) {
	return func(g Gomega) {
		mpc := soakMPC(g)
		current := signerFingerprint(mpc)
		g.Expect(current).NotTo(BeElementOf("", before), "a new CA signs")
		if want != "" {
			g.Expect(current).To(Equal(want), "the provided CA signs")
		}
		g.Expect(mpc.Status.Signer.BundleFingerprints).To(Equal([]string{current}), "the earlier CAs left the bundle")
		g.Expect(meta.IsStatusConditionTrue(mpc.Status.Conditions, proxyv1alpha1.ConditionReady)).To(BeTrue(), "the configuration is Ready")
		bundle := &corev1.Secret{}
		g.Expect(sys.HubClient.Get(ctx, types(localsystem.Namespace, proxyv1alpha1.CABundleSecretName), bundle)).To(Succeed())
		cas, err := certs.ParseCertificates(bundle.Data["ca.crt"])
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(cas).To(HaveLen(1), "the published bundle holds the current CA alone")
		ca := cas[0]
		for _, cluster := range clusterNames() {
			g.Expect(agentCertificate(g, cluster).CheckSignatureFrom(ca)).To(Succeed(), "%s's agent certificate", cluster)
		}
		pcs := &proxyv1alpha1.ProxyCertificateList{}
		g.Expect(sys.HubClient.List(ctx, pcs, client.InNamespace(localsystem.Namespace))).To(Succeed())
		for _, pc := range pcs.Items {
			s := &corev1.Secret{}
			g.Expect(sys.HubClient.Get(ctx, types(pc.Namespace, pc.Spec.SecretName), s)).To(Succeed())
			chain, err := certs.ParseCertificates(s.Data[corev1.TLSCertKey])
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(chain[0].CheckSignatureFrom(ca)).To(Succeed(), "secret %s", s.Name)
		}
	}
}

// cutNetwork takes a managed cluster off the network for 5 to 30 s (1st-cluster twice as often as cluster1, whose
// route squid restarts also break): its machine-side veth down, then up with its routes restored. It calls started
// as the cut begins.
func (s *soakSystem) cutNetwork(ctx context.Context, r *rand.Rand, f *soak.Fault, started func()) error {
	cluster := localsystem.DigitCluster
	if r.IntN(3) == 0 {
		cluster = localsystem.ProxiedCluster
	}
	d := time.Duration(minCut+r.IntN(maxCut-minCut+1)) * time.Second
	f.Cluster, f.Target = cluster, fmt.Sprintf("%s for %s", cluster, d)
	started()
	if err := s.nodes[cluster].CutNetwork(ctx, d); err != nil {
		// Never leave a cluster cut off.
		return errors.Join(err, s.nodes[cluster].Reconnect())
	}
	return nil
}
