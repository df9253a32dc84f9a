package audit

import (
	"errors"
	"net"
	"net/http"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

// startReceiver serves an audit webhook on 127.0.0.1 and writes the kubeconfig that names it.
func startReceiver(t *testing.T) (*receiver, string) {
	t.Helper()
	cert, caPEM := loopbackCert(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rcv := &receiver{}
	serveTLS(t, ln, cert, rcv)
	return rcv, writeKubeconfig(t, ln.Addr().String(), caPEM)
}

// In batch mode, events reach the webhook in audit.k8s.io/v1 EventLists, several to a POST.
func TestTheWebhookReceivesEventListsInBatches(t *testing.T) {
	g := NewWithT(t)
	rcv, kubeconfig := startReceiver(t)
	a := startAuditor(t, Options{WebhookKubeconfig: kubeconfig, WebhookBatch: quickBatch(), Replica: "proxy-server-1"})
	sent := counted(sinkWebhook, resultSent)

	var ids []string
	for _, name := range []string{"a", "b", "c", "d", "e"} {
		e := a.Begin(getPod(name))
		e.Complete(200, 0, time.Time{})
		ids = append(ids, e.ID())
	}
	g.Eventually(rcv.ids).Should(ConsistOf(ids))
	g.Expect(rcv.errors()).To(BeEmpty())
	// The receiver has them before the sender counts them.
	g.Eventually(func() float64 { return counted(sinkWebhook, resultSent) }).Should(Equal(sent + 5))
	for _, ev := range rcv.events() {
		g.Expect(ev.Stage).To(Equal(auditv1.StageResponseComplete))
		g.Expect(ev.Verb).To(Equal("get"))
		g.Expect(ev.User.Username).To(Equal("alice"))
		g.Expect(ev.Annotations).To(HaveKeyWithValue(AnnotationReplica, "proxy-server-1"))
	}
	g.Expect(healthOf(a, sinkWebhook)).To(And(
		HaveField("Up", BeTrue()), HaveField("Mode", ModeBatch), HaveField("LastError", BeEmpty())))
}

// In blocking mode, the event has reached the webhook when Complete returns.
func TestTheBlockingWebhookHasTheEventWhenCompleteReturns(t *testing.T) {
	g := NewWithT(t)
	rcv, kubeconfig := startReceiver(t)
	a := startAuditor(t, Options{WebhookKubeconfig: kubeconfig, WebhookMode: ModeBlocking})

	e := a.Begin(getPod("a"))
	g.Expect(rcv.ids()).To(BeEmpty())
	e.Complete(200, 0, time.Time{})
	g.Expect(rcv.ids()).To(Equal([]string{e.ID()}))
}

// A webhook that cannot be reached is counted, and reported down with the reason, until it takes events again.
func TestAnUnreachableWebhookIsReportedDownUntilItIsBack(t *testing.T) {
	g := NewWithT(t)
	cert, caPEM := loopbackCert(t)
	addr := freeLoopbackAddr(t)
	a := startAuditor(t, Options{
		WebhookKubeconfig: writeKubeconfig(t, addr, caPEM), WebhookBatch: quickBatch(), WebhookInitialBackoff: time.Millisecond,
	})
	failed, sent := counted(sinkWebhook, resultError), counted(sinkWebhook, resultSent)

	lost := a.Begin(getPod("lost"))
	lost.Complete(200, 0, time.Time{})
	g.Eventually(func() float64 { return counted(sinkWebhook, resultError) }).Should(Equal(failed + 1))
	h := healthOf(a, sinkWebhook)
	g.Expect(h.Up).To(BeFalse())
	g.Expect(h.LastError).To(ContainSubstring("connection refused"))
	g.Expect(h.LastError).NotTo(ContainSubstring(webhookCredential))
	g.Expect(upGauge(sinkWebhook)).To(BeZero())

	ln, err := net.Listen("tcp", addr)
	g.Expect(err).NotTo(HaveOccurred(), "listen again on the webhook's address")
	rcv := &receiver{}
	serveTLS(t, ln, cert, rcv)
	back := a.Begin(getPod("back"))
	back.Complete(200, 0, time.Time{})
	g.Eventually(rcv.ids).Should(Equal([]string{back.ID()}))
	g.Eventually(func() bool { return healthOf(a, sinkWebhook).Up }).Should(BeTrue())
	g.Expect(upGauge(sinkWebhook)).To(Equal(1.0))
	g.Expect(counted(sinkWebhook, resultSent)).To(Equal(sent + 1))
	g.Expect(healthOf(a, sinkWebhook).Since).NotTo(Equal(h.Since))
}

// A webhook that answers with an error is down as well.
func TestAWebhookAnsweringErrorsIsReportedDown(t *testing.T) {
	g := NewWithT(t)
	cert, caPEM := loopbackCert(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	serveTLS(t, ln, cert, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "overloaded", http.StatusServiceUnavailable)
	}))
	a := startAuditor(t, Options{
		WebhookKubeconfig: writeKubeconfig(t, ln.Addr().String(), caPEM), WebhookMode: ModeBlocking,
		WebhookInitialBackoff: time.Millisecond,
	})
	failed := counted(sinkWebhook, resultError)
	a.Begin(getPod("a")).Complete(200, 0, time.Time{})
	g.Expect(counted(sinkWebhook, resultError)).To(Equal(failed + 1))
	g.Expect(healthOf(a, sinkWebhook).Up).To(BeFalse())
	g.Expect(healthOf(a, sinkWebhook).LastError).To(ContainSubstring("answered 503"))
}

// In blocking-strict mode a request is refused while the sink is down, but for one a second, whose event tries the
// sink again; once that succeeds, requests are served again.
func TestBlockingStrictRefusesRequestsWhileTheSinkIsDown(t *testing.T) {
	g := NewWithT(t)
	cert, caPEM := loopbackCert(t)
	addr := freeLoopbackAddr(t)
	clock := clocktesting.NewFakePassiveClock(t0)
	a := startAuditor(t, Options{
		WebhookKubeconfig: writeKubeconfig(t, addr, caPEM), WebhookMode: ModeBlockingStrict,
		WebhookInitialBackoff: time.Millisecond, Clock: clock,
	})

	first := a.Begin(getPod("first"))
	g.Expect(first.Admit()).To(Succeed())
	first.Complete(200, 0, time.Time{}) // fails: nothing listens
	g.Expect(healthOf(a, sinkWebhook).Up).To(BeFalse())

	refused := a.Begin(getPod("refused")).Admit()
	var down *SinkDownError
	g.Expect(errors.As(refused, &down)).To(BeTrue(), "%v", refused)
	g.Expect(down.Sink).To(Equal(sinkWebhook))
	g.Expect(refused).To(MatchError("the audit webhook sink cannot record events"))

	clock.SetTime(t0.Add(strictRetryInterval))
	probe := a.Begin(getPod("probe"))
	g.Expect(probe.Admit()).To(Succeed(), "one request a second tries the sink")
	g.Expect(a.Begin(getPod("next")).Admit()).To(MatchError(down))

	ln, err := net.Listen("tcp", addr)
	g.Expect(err).NotTo(HaveOccurred(), "listen again on the webhook's address")
	rcv := &receiver{}
	serveTLS(t, ln, cert, rcv)
	probe.Complete(200, 0, time.Time{})
	g.Expect(rcv.ids()).To(Equal([]string{probe.ID()}))
	g.Expect(healthOf(a, sinkWebhook).Up).To(BeTrue())
	g.Expect(a.Begin(getPod("served")).Admit()).To(Succeed())

	quiet := writeFile(t, "policy.yaml", "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: None\n")
	b := startAuditor(t, Options{
		WebhookKubeconfig: writeKubeconfig(t, freeLoopbackAddr(t), caPEM), WebhookMode: ModeBlockingStrict,
		WebhookInitialBackoff: time.Millisecond, PolicyFile: quiet,
	})
	g.Expect(b.Begin(getPod("unrecorded")).Admit()).To(Succeed(), "a request the policy does not record needs no sink")
}

// When the policy records RequestReceived, blocking-strict is kube-apiserver's: a request whose RequestReceived event
// did not reach the sink is refused, and the next one tries again.
func TestBlockingStrictRefusesARequestWhoseRequestReceivedEventFailed(t *testing.T) {
	g := NewWithT(t)
	cert, caPEM := loopbackCert(t)
	addr := freeLoopbackAddr(t)
	policy := writeFile(t, "policy.yaml", "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n")
	a := startAuditor(t, Options{
		WebhookKubeconfig: writeKubeconfig(t, addr, caPEM), WebhookMode: ModeBlockingStrict,
		WebhookInitialBackoff: time.Millisecond, PolicyFile: policy,
	})

	g.Expect(a.Begin(getPod("a")).Admit()).To(MatchError(&SinkDownError{Sink: sinkWebhook}))

	ln, err := net.Listen("tcp", addr)
	g.Expect(err).NotTo(HaveOccurred(), "listen again on the webhook's address")
	rcv := &receiver{}
	serveTLS(t, ln, cert, rcv)
	e := a.Begin(getPod("b"))
	g.Expect(e.Admit()).To(Succeed())
	g.Expect(rcv.events()).To(ConsistOf(And(
		HaveField("AuditID", BeEquivalentTo(e.ID())), HaveField("Stage", auditv1.StageRequestReceived))))
}
