//go:build e2e

package e2e

import (
	"bufio"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	gomegatypes "github.com/onsi/gomega/types"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/certs"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/kubeclient"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/localsystem"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/localsystem/ports"
)

// The annotations the proxy-servers put on their audit events.
const (
	annotationCluster = "cluster-proxy.open-cluster-management.io/cluster"
	annotationVia     = "cluster-proxy.open-cluster-management.io/via"
)

// records is who did what on which cluster: the proxy-servers' audit events in a file and at a webhook, exec sessions
// recorded and replayed, and the right of its own a stream into a cluster needs.
func records() {
	Context("on the record: audit events, recorded sessions and a right of their own for streams", Ordered, func() {
		var rec *recordsFixture
		BeforeAll(func() { rec = startRecords() })
		AfterAll(func() { rec.stop() })

		It("lets a hub user with get on clusters/proxy read a cluster but open no stream into it, on both paths and both protocols", func() {
			cluster := localsystem.ProxiedCluster
			tok := hubReaderToken(cluster)
			for _, kc := range []string{viaHubKubeconfig(cluster, "reader", tok), userKubeconfig(cluster, "reader", tok)} {
				out, err := kubeclient.Kubectl(kc, "get", "pods", "-n", workloadNamespace)
				Expect(err).NotTo(HaveOccurred(), kc)
				Expect(out).To(ContainSubstring("probe-"), "%s: a reader reads", kc)
				for _, websockets := range []string{"true", "false"} {
					cmd := kubectl(kc, []string{"KUBECTL_REMOTE_COMMAND_WEBSOCKETS=" + websockets},
						"exec", "-n", workloadNamespace, "deploy/probe", "--", "/probe", "echo", "not for readers")
					out, err := cmd.CombinedOutput()
					Expect(err).To(HaveOccurred(), "%s, websockets %s: %s", kc, websockets, out)
					Expect(string(out)).To(ContainSubstring(`cannot create resource "clusters/proxy"`), "%s, websockets %s", kc, websockets)
					Expect(string(out)).NotTo(ContainSubstring("not for readers"))
				}
			}
			for _, c := range sys.Managed {
				Expect(managedAuditSince(c.AuditLog(), 0, func(ev managedAuditEvent) bool {
					return strings.HasSuffix(ev.ImpersonatedUser.Username, "team:reader") && ev.ObjectRef.Subresource == "exec"
				})).To(BeEmpty(), "%s: the cluster's RBAC would have let the reader exec; the hub stopped it first", c.Name())
			}
		})

		It("writes an event of every request on both paths to the file and the webhook, joined to the hub's audit log by its id", func() {
			cluster := localsystem.ProxiedCluster
			admin := viaHubKubeconfig(cluster, "admin", "")
			user := userKubeconfig(cluster, "hub-user", hubUserToken())
			viewerToken(cluster) // the hub user's rights on the cluster
			reader := userKubeconfig(cluster, "reader", hubReaderToken(cluster))
			for _, kc := range []string{admin, user} {
				_, err := kubeclient.Kubectl(kc, "get", "pods", "-n", workloadNamespace)
				Expect(err).NotTo(HaveOccurred(), kc)
				_, err = kubeclient.Kubectl(kc, "get", "--raw", "/api/v1/namespaces/"+workloadNamespace+"/pods?watch=true&timeoutSeconds=1")
				Expect(err).NotTo(HaveOccurred(), kc)
				out, err := kubeclient.Kubectl(kc, "exec", "-n", workloadNamespace, "deploy/probe", "--", "/probe", "echo", "audited")
				Expect(err).NotTo(HaveOccurred(), kc)
				Expect(out).To(Equal("audited\n"))
			}
			_, err := kubeclient.Kubectl(reader, "exec", "-n", workloadNamespace, "deploy/probe", "--", "/probe", "echo", "refused")
			Expect(err).To(HaveOccurred())

			type seen struct{ via, verb, resource, subresource string }
			want := map[seen]string{}
			for _, via := range []string{"aggregated", "user-server"} {
				want[seen{via, "list", "pods", ""}] = "a get of pods"
				want[seen{via, "watch", "pods", ""}] = "a watch of pods"
				want[seen{via, "create", "pods", "exec"}] = "an exec"
			}
			var events []auditv1.Event
			Eventually(func(g Gomega) {
				file := rec.fileEvents(g)
				hooked := rec.receiver.received()
				for _, sink := range []struct {
					name   string
					events []auditv1.Event
				}{{"file", file}, {"webhook", hooked}} {
					got := map[seen]bool{}
					for _, ev := range sink.events {
						if ev.Annotations[annotationCluster] != cluster || ev.ObjectRef == nil {
							continue
						}
						got[seen{ev.Annotations[annotationVia], ev.Verb, ev.ObjectRef.Resource, ev.ObjectRef.Subresource}] = true
					}
					for s, what := range want {
						g.Expect(got).To(HaveKey(s), "%s: %s through the %s path", sink.name, what, s.via)
					}
					g.Expect(sink.events).To(ContainElement(And(
						HaveField("ResponseStatus.Code", BeEquivalentTo(http.StatusForbidden)),
						HaveField("User.Username", "system:serviceaccount:team:reader"))), "%s: the refused exec", sink.name)
				}
				events = file
			}).Should(Succeed())

			hubIDs := hubAuditIDs()
			joined := 0
			for _, ev := range events {
				if ev.Annotations[annotationVia] != "aggregated" || ev.Annotations[annotationCluster] != cluster {
					continue
				}
				Expect(hubIDs).To(HaveKey(string(ev.AuditID)), "every event of the aggregated path has its hub audit entry: %s %s",
					ev.Verb, ev.RequestURI)
				Expect(hubIDs[string(ev.AuditID)]).To(Equal(ev.User.Username), "the same user on both records")
				joined++
			}
			Expect(joined).To(BeNumerically(">=", 3))
			for _, ev := range events {
				if ev.ObjectRef != nil && ev.ObjectRef.Subresource == "exec" && ev.ResponseStatus.Code == http.StatusSwitchingProtocols {
					Expect(ev.RequestURI).To(ContainSubstring("command=%2Fprobe"), "the command is on the record")
				}
			}
			raw := rec.fileText()
			Expect(raw).NotTo(ContainSubstring(hubUserToken()), "never a credential")
			Expect(raw).NotTo(ContainSubstring("Bearer"))
		})

		It("records kubectl exec -it through the hub and through the user-server, and sessions play replays what the command wrote", func() {
			cluster := localsystem.ProxiedCluster
			viewerToken(cluster)
			for _, path := range []struct{ name, kubeconfig, user, websockets string }{
				{"the hub over websockets", viaHubKubeconfig(cluster, "admin", ""), "kubernetes-admin", "true"},
				{"the hub over SPDY", viaHubKubeconfig(cluster, "admin", ""), "kubernetes-admin", "false"},
				{"the user-server over websockets", userKubeconfig(cluster, "hub-user", hubUserToken()), "system:serviceaccount:team:hub-user", "true"},
				{"the user-server over SPDY", userKubeconfig(cluster, "hub-user", hubUserToken()), "system:serviceaccount:team:hub-user", "false"},
			} {
				By("through " + path.name)
				typed := "typed-" + rand.String(8)
				out := execInTerminal(path.kubeconfig, []string{"KUBECTL_REMOTE_COMMAND_WEBSOCKETS=" + path.websockets}, typed)
				Expect(out).To(ContainSubstring(typed), "the session itself worked")
				// Headers start to the second: the session is the one not replayed before whose output has the line.
				list, err := plugin("sessions", "list", "--dir", rec.sessionsDir, "--cluster", cluster, "--user", path.user)
				Expect(err).NotTo(HaveOccurred())
				var replayed []string
				for _, id := range sessionsWith(list, "cat") {
					if rec.played[id] {
						continue
					}
					played, err := plugin("sessions", "play", id, "--dir", rec.sessionsDir)
					Expect(err).NotTo(HaveOccurred())
					replayed = append(replayed, played)
					if strings.Contains(played, typed) {
						rec.played[id] = true
					}
				}
				Expect(replayed).To(ContainElement(ContainSubstring(typed)), "the output of the typed line, replayed: %s", list)
			}
		})

		It("refuses exec with onFailure Closed while sessions cannot be recorded, serves get meanwhile, and counts it", func() {
			cluster := localsystem.ProxiedCluster
			admin := viaHubKubeconfig(cluster, "admin", "")
			restore := rec.lockSessions()
			DeferCleanup(restore)
			out, err := kubeclient.Kubectl(admin, "exec", "-n", workloadNamespace, "deploy/probe", "--", "/probe", "echo", "unrecorded")
			Expect(err).To(HaveOccurred())
			Expect(err.Error()).To(ContainSubstring("cannot be recorded"), "the message says why")
			Expect(out).NotTo(ContainSubstring("unrecorded"))
			out, err = kubeclient.Kubectl(admin, "get", "pods", "-n", workloadNamespace)
			Expect(err).NotTo(HaveOccurred())
			Expect(out).To(ContainSubstring("probe-"), "reads do not need a recording")
			Expect(proxyServerMetric(`cluster_proxy_session_recordings_total{result="refused"}`)).To(BeNumerically(">=", 1))
			Expect(proxyServerMetric(`cluster_proxy_session_recording_sink_up`)).To(BeNumerically("<", 3),
				"the replica that failed to record reports its sink down")
			Eventually(recordsWritable).Should(And(HaveField("Status", metav1.ConditionFalse),
				HaveField("Reason", proxyv1alpha1.ReasonRecordSinkDown), HaveField("Message", ContainSubstring("session-recording"))),
				"the configuration names the replica and the sink")

			restore()
			Eventually(func(g Gomega) {
				out, err := kubeclient.Kubectl(admin, "exec", "-n", workloadNamespace, "deploy/probe", "--", "/probe", "echo", "recorded again")
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(out).To(Equal("recorded again\n"))
			}).Should(Succeed())
			// A replica's sink is up again once one of its sessions was recorded: sessions until every replica had one.
			Eventually(func(g Gomega) {
				_, err := kubeclient.Kubectl(admin, "exec", "-n", workloadNamespace, "deploy/probe", "--", "/probe", "echo", "again")
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(recordsWritable(g).Status).To(Equal(metav1.ConditionTrue))
			}).WithPolling(time.Second).Should(Succeed())
		})

		It("reports every series the records' alerts read while records are on", func() {
			reported := proxyServerSeries()
			for _, a := range shippedAlerts() {
				for _, name := range metricNames(a.Expr) {
					if recordMetric(name) {
						Expect(reported).To(HaveKey(name), "%s reads %s", a.Alert, name)
					}
				}
			}
		})
	})
}

// recordMetric says whether a metric is one of the records', which a proxy-server reports only while the
// configuration asks for records (audit, session recording).
func recordMetric(name string) bool {
	return strings.HasPrefix(name, "cluster_proxy_audit_") || strings.HasPrefix(name, "cluster_proxy_session_recording")
}

// recordsFixture is the records' side of the local system: claims on folders of this machine, a webhook receiver on
// the hub's side of it, and the configuration that writes to them.
type recordsFixture struct {
	auditDir, sessionsDir string
	receiver              *auditReceiver
	played                map[string]bool
}

// The claims the proxy-servers write their records to.
const (
	auditClaim        = "cluster-proxy-audit"
	sessionsClaim     = "cluster-proxy-sessions"
	auditWebhookName  = "cluster-proxy-audit-webhook"
	imageUserWritable = 0o777
)

func startRecords() *recordsFixture {
	GinkgoHelper()
	rec := &recordsFixture{auditDir: filepath.Join(workDir, "records", "audit"), sessionsDir: filepath.Join(workDir, "records", "sessions"),
		played: map[string]bool{}}
	for dir, claim := range map[string]string{rec.auditDir: auditClaim, rec.sessionsDir: sessionsClaim} {
		Expect(os.MkdirAll(dir, 0o700)).To(Succeed())
		// A hostPath volume gets no fsGroup: the image's user must be able to write the folder as it is.
		Expect(os.Chmod(dir, imageUserWritable)).To(Succeed())
		createHostPathClaim(claim, dir)
	}
	rec.receiver = startAuditReceiver()
	kubeconfig := rec.receiver.kubeconfig()
	createOrExists(sys.HubClient, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: localsystem.Namespace, Name: auditWebhookName},
		Data: map[string][]byte{"kubeconfig": kubeconfig}})

	Expect(updateMPC(ctx(), func(mpc *proxyv1alpha1.ManagedProxyConfiguration) {
		mpc.Spec.Audit = &proxyv1alpha1.ManagedProxyConfigurationAudit{
			Log:     &proxyv1alpha1.AuditLog{PersistentVolumeClaimName: auditClaim, MaxSize: 10},
			Webhook: &proxyv1alpha1.AuditWebhook{KubeconfigSecretName: auditWebhookName, Mode: proxyv1alpha1.AuditWebhookBatch},
		}
		mpc.Spec.SessionRecording = &proxyv1alpha1.ManagedProxyConfigurationSessionRecording{
			PersistentVolumeClaimName: sessionsClaim, OnFailure: proxyv1alpha1.RecordingFailClosed}
	})).To(Succeed())
	expectProxyServersRolledOut(ContainElement(HavePrefix("--session-recording-dir=")))
	return rec
}

func (rec *recordsFixture) stop() {
	GinkgoHelper()
	Expect(updateMPC(ctx(), func(mpc *proxyv1alpha1.ManagedProxyConfiguration) {
		mpc.Spec.Audit, mpc.Spec.SessionRecording = nil, nil
	})).To(Succeed())
	expectProxyServersRolledOut(Not(ContainElement(HavePrefix("--session-recording-dir="))))
	for _, claim := range []string{auditClaim, sessionsClaim} {
		Expect(client.IgnoreNotFound(sys.HubClient.Delete(ctx(), &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: localsystem.Namespace, Name: claim}}))).To(Succeed())
		Expect(client.IgnoreNotFound(sys.HubClient.Delete(ctx(), &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: claim}}))).To(Succeed())
	}
	Expect(client.IgnoreNotFound(sys.HubClient.Delete(ctx(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: localsystem.Namespace, Name: auditWebhookName}}))).To(Succeed())
	rec.receiver.stop()
}

// expectProxyServersRolledOut waits until every proxy-server pod runs arguments that match, and every cluster is
// Available again with its agents on every replica.
func expectProxyServersRolledOut(args gomegatypes.GomegaMatcher) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		d := &appsv1.Deployment{}
		g.Expect(sys.HubClient.Get(ctx(), types(localsystem.Namespace, proxyv1alpha1.DefaultConfigurationName), d)).To(Succeed())
		g.Expect(d.Spec.Template.Spec.Containers[0].Args).To(args)
		g.Expect(deploymentRolledOut(d)).To(BeTrue(), "%+v", d.Status)
	}).WithTimeout(5 * time.Minute).Should(Succeed())
	expectEveryClusterAvailable()
	expectAgentsOnEveryReplica(3)
}

// createHostPathClaim binds a claim of the proxy-servers' namespace to a volume that is dir on this machine, where
// the hub's node runs.
func createHostPathClaim(name, dir string) {
	GinkgoHelper()
	size := resource.MustParse("1Gi")
	createOrExists(sys.HubClient, &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PersistentVolumeSpec{
		Capacity:                      corev1.ResourceList{corev1.ResourceStorage: size},
		AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
		PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
		StorageClassName:              "",
		PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{
			Path: dir, Type: ptr.To(corev1.HostPathDirectory)}},
	}})
	createOrExists(sys.HubClient, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: localsystem.Namespace, Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			StorageClassName: ptr.To(""),
			VolumeName:       name,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
		}})
}

// fileEvents are the events of every proxy-server pod's audit file.
func (rec *recordsFixture) fileEvents(g Gomega) []auditv1.Event {
	var out []auditv1.Event
	for _, line := range strings.Split(rec.fileText(), "\n") {
		if line == "" {
			continue
		}
		var ev auditv1.Event
		g.Expect(json.Unmarshal([]byte(line), &ev)).To(Succeed(), "every line is an event: %s", line)
		out = append(out, ev)
	}
	return out
}

func (rec *recordsFixture) fileText() string {
	var b strings.Builder
	Expect(filepath.WalkDir(rec.auditDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".log") {
			return err
		}
		b.Write(must(os.ReadFile(path)))
		return nil
	})).To(Succeed())
	return b.String()
}

// lockSessions takes the write permission on the recordings' folders away from the proxy-servers' user, so no
// session can be recorded; the function returned gives it back.
func (rec *recordsFixture) lockSessions() func() {
	GinkgoHelper()
	modes := map[string]fs.FileMode{}
	Expect(filepath.WalkDir(rec.sessionsDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		modes[path] = info.Mode().Perm()
		return os.Chmod(path, 0o555)
	})).To(Succeed())
	var once sync.Once
	return func() {
		once.Do(func() {
			for path, mode := range modes {
				Expect(os.Chmod(path, mode)).To(Succeed())
			}
		})
	}
}

// hubReaderToken is the token of hub ServiceAccount team/reader, whom the hub grants get on clusters/proxy of
// cluster and nothing more, and whom the cluster's RBAC would let read, exec and port-forward in the workload's
// namespace: only the hub's stream right stands between it and a shell.
func hubReaderToken(cluster string) string {
	GinkgoHelper()
	createOrExists(sys.HubClient, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}})
	createOrExists(sys.HubClient, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "reader"}})
	createOrExists(sys.HubClient, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "read-clusters:reader"}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{gatewayGroup}, Resources: []string{"clusters/proxy"}, ResourceNames: []string{cluster}, Verbs: []string{"get"}}}})
	createOrExists(sys.HubClient, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "read-clusters:reader"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "read-clusters:reader"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "team", Name: "reader"}}})
	viewerToken(cluster) // the Role probe-operator
	createOrExists(managedClient(cluster), &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: workloadNamespace, Name: "probe-operator-reader"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "probe-operator"},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "cluster:hub:system:serviceaccount:team:reader"}}})
	return token(must(kubernetes.NewForConfig(sys.Hub.Config)), "team", "reader")
}

// hubAuditIDs maps the audit ID of every hub audit event on clusters/proxy to its user.
func hubAuditIDs() map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(string(must(os.ReadFile(sys.Hub.AuditLog()))), "\n") {
		var ev auditv1.Event
		if json.Unmarshal([]byte(line), &ev) != nil || ev.ObjectRef == nil || ev.ObjectRef.APIGroup != gatewayGroup ||
			ev.ObjectRef.Subresource != "proxy" {
			continue
		}
		out[string(ev.AuditID)] = ev.User.Username
	}
	return out
}

// execInTerminal runs kubectl exec -it of the probe's cat in a terminal (script(1) gives kubectl one) with env, types
// line, waits for it to come back, and ends the input; it returns what kubectl wrote.
func execInTerminal(kubeconfig string, env []string, line string) string {
	GinkgoHelper()
	command := strings.Join([]string{kubectl(kubeconfig, nil).Path, "--kubeconfig", kubeconfig, "exec", "-it", "-n", workloadNamespace,
		"deploy/probe", "--", "/probe", "cat"}, " ")
	cmd := exec.Command("script", "-q", "-e", "-c", command, "/dev/null")
	cmd.Env = append(os.Environ(), env...)
	stdin := must(cmd.StdinPipe())
	stdout := must(cmd.StdoutPipe())
	cmd.Stderr = GinkgoWriter
	Expect(cmd.Start()).To(Succeed())
	var out strings.Builder
	seen := make(chan struct{})
	go func() {
		r := bufio.NewReader(stdout)
		once := sync.Once{}
		for {
			b, err := r.ReadByte()
			if err != nil {
				return
			}
			out.WriteByte(b)
			if strings.Count(out.String(), line) >= 2 { // the terminal's echo, then cat's copy
				once.Do(func() { close(seen) })
			}
		}
	}()
	_, err := io.WriteString(stdin, line+"\r")
	Expect(err).NotTo(HaveOccurred())
	Eventually(seen).Should(BeClosed(), "the typed line came back")
	_, err = io.WriteString(stdin, "\x04") // end of input: cat ends, and the session with it
	Expect(err).NotTo(HaveOccurred())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	Eventually(done).Should(Receive(BeNil()), "kubectl exec ended")
	return out.String()
}

// sessionsWith are the SESSIONs of a sessions list whose COMMAND contains command.
func sessionsWith(list, command string) []string {
	GinkgoHelper()
	lines := strings.Split(strings.TrimSpace(list), "\n")
	Expect(strings.Fields(lines[0])).To(HaveExactElements("SESSION", "CLUSTER", "USER", "NAMESPACE", "POD", "CONTAINER", "COMMAND",
		"STARTED", "DURATION"))
	var out []string
	for _, line := range lines[1:] {
		if fields := strings.Fields(line); len(fields) > 0 && strings.Contains(line, command) {
			out = append(out, fields[0])
		}
	}
	return out
}

// proxyServerMetric is the sum over the proxy-server pods of the series (a name with its labels, as the exposition
// format writes it), read through the hub kube-apiserver's pod proxy.
func proxyServerMetric(series string) float64 {
	GinkgoHelper()
	var sum float64
	for _, pod := range proxyServerPods(Default) {
		out, err := kubeclient.Kubectl(sys.Hub.Kubeconfig, "get", "--raw",
			fmt.Sprintf("/api/v1/namespaces/%s/pods/%s:8092/proxy/metrics", localsystem.Namespace, pod))
		Expect(err).NotTo(HaveOccurred())
		for _, line := range strings.Split(out, "\n") {
			if v, ok := strings.CutPrefix(line, series+" "); ok {
				sum += must(strconv.ParseFloat(strings.TrimSpace(v), 64))
			}
		}
	}
	return sum
}

// recordsWritable is the default configuration's RecordsWritable condition.
func recordsWritable(g Gomega) metav1.Condition {
	mpc := &proxyv1alpha1.ManagedProxyConfiguration{}
	g.Expect(sys.HubClient.Get(ctx(), types("", proxyv1alpha1.DefaultConfigurationName), mpc)).To(Succeed())
	c := meta.FindStatusCondition(mpc.Status.Conditions, proxyv1alpha1.ConditionRecordsWritable)
	g.Expect(c).NotTo(BeNil())
	return *c
}

// proxyServerSeries are the metric names the proxy-server pods report, read through the hub kube-apiserver's pod
// proxy.
func proxyServerSeries() map[string]bool {
	GinkgoHelper()
	names := map[string]bool{}
	for _, pod := range proxyServerPods(Default) {
		out, err := kubeclient.Kubectl(sys.Hub.Kubeconfig, "get", "--raw",
			fmt.Sprintf("/api/v1/namespaces/%s/pods/%s:8092/proxy/metrics", localsystem.Namespace, pod))
		Expect(err).NotTo(HaveOccurred())
		for _, line := range strings.Split(out, "\n") {
			if name, _, ok := strings.Cut(line, "{"); ok && !strings.HasPrefix(line, "#") {
				names[name] = true
			} else if name, _, ok := strings.Cut(line, " "); ok && !strings.HasPrefix(line, "#") {
				names[name] = true
			}
		}
	}
	return names
}

// auditReceiver is an audit webhook: an HTTPS server on the hub's side of this machine that keeps the EventLists the
// proxy-servers post.
type auditReceiver struct {
	srv    *http.Server
	url    string
	ca     []byte
	mu     sync.Mutex
	events []auditv1.Event
}

func startAuditReceiver() *auditReceiver {
	GinkgoHelper()
	now := time.Now()
	ca := must(certs.NewCA("audit-receiver-ca", time.Hour, now))
	ip := sys.Hub.HostIP
	leaf := must(certs.IssueLeaf(ca, certs.LeafSpec{CommonName: "audit-receiver", IPAddresses: []net.IP{ip},
		Usages: []certs.Usage{certs.UsageServerAuth}, Duration: time.Hour}, now))
	pair := must(tls.X509KeyPair(leaf.CertPEM, leaf.KeyPEM))
	ln := must(tls.Listen("tcp", net.JoinHostPort(ip.String(), strconv.Itoa(ports.Free())), &tls.Config{
		Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}))
	r := &auditReceiver{url: "https://" + ln.Addr().String(), ca: ca.CertPEM}
	r.srv = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var list auditv1.EventList
		if err := json.NewDecoder(req.Body).Decode(&list); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		r.events = append(r.events, list.Items...)
		r.mu.Unlock()
	})}
	go func() { _ = r.srv.Serve(ln) }()
	return r
}

// kubeconfig is the receiver in the format of kube-apiserver's --audit-webhook-config-file.
func (r *auditReceiver) kubeconfig() []byte {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["receiver"] = &clientcmdapi.Cluster{Server: r.url, CertificateAuthorityData: r.ca}
	cfg.AuthInfos["proxy-server"] = &clientcmdapi.AuthInfo{}
	cfg.Contexts["receiver"] = &clientcmdapi.Context{Cluster: "receiver", AuthInfo: "proxy-server"}
	cfg.CurrentContext = "receiver"
	return must(clientcmd.Write(*cfg))
}

func (r *auditReceiver) received() []auditv1.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]auditv1.Event(nil), r.events...)
}

func (r *auditReceiver) stop() { _ = r.srv.Close() }
