//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/agent"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/localsystem"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/requestloop"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/pkg/clusterproxy"
)

// report writes a loop's figures to the spec's output.
func report(what string, ok int, failures []requestloop.Failure) {
	AddReportEntry(what, fmt.Sprintf("%d answered, %d failed, failures over %s", ok, len(failures),
		requestloop.Gap(failures).Round(10*time.Millisecond)))
	for _, f := range failures {
		GinkgoWriter.Printf("    %s %s\n", f.At.Format("15:04:05.000"), f.Err)
	}
}

// haLoops are request loops to every managed cluster through every way in: the hub's aggregated API (the hub
// kube-apiserver in front, as the hub admin), the user-server Service, and the proxy-servers' gRPC frontend
// (pkg/clusterproxy) and HTTP-CONNECT frontend.
type haLoops struct {
	requests map[string]*requestloop.Loop
	// streams are the long-lived streams of the case, by way in: a watch of a namespace on every cluster through every
	// way in, and an exec into, a followed log of and a port-forward to the probe pod through the user-server and the
	// gRPC frontend.
	streams map[string][]*longStream
}

// startHALoops starts a loop every 100 ms per cluster and way in, and waits for each to answer.
func startHALoops() haLoops {
	GinkgoHelper()
	p := proxies()
	loops := haLoops{requests: map[string]*requestloop.Loop{}, streams: map[string][]*longStream{}}
	for _, cluster := range clusterNames() {
		setStreamMark(cluster, "start")
		base := rest.CopyConfig(managedConfig(cluster))
		base.Host = "https://kubernetes.default.svc"
		for way, cfg := range map[string]*rest.Config{
			"user-server":           userRESTConfig(userKubeconfig(cluster, "viewer", viewerToken(cluster))),
			"gRPC frontend":         must(p.RESTConfig(cluster, base)),
			"HTTP-CONNECT frontend": httpConnectConfig(cluster, base),
			"hub's aggregated API":  must(clusterproxy.RESTConfigViaHub(rest.CopyConfig(sys.Hub.Config), cluster)),
		} {
			name := cluster + " through the " + way
			l := must(requestloop.Start(cfg, 100*time.Millisecond))
			DeferCleanup(func() { l.Stop() })
			loops.requests[name] = l
			loops.streams[name] = []*longStream{startWatchStream(cfg)}
			if way != "HTTP-CONNECT frontend" { // client-go's upgrade transports use cfg.Proxy, which that way has not
				loops.streams[name] = append(loops.streams[name], startLongStreams(cluster, cfg)...)
			}
		}
	}
	for name, l := range loops.requests {
		Eventually(l.Succeeded).Should(BeNumerically(">", 5), name)
	}
	return loops
}

// stop lets every loop answer a few more requests, stops them, reports their counts and returns the failed requests
// by loop.
//
// Each stream must then either have ended or carry a new mark (for a watch, a change made to its namespace now): a
// stream whose proxy-server went away ends, it never hangs. How many ended, of each kind, is reported with the errors
// they ended with.
func (loops haLoops) stop(what string) map[string][]requestloop.Failure {
	GinkgoHelper()
	for name, l := range loops.requests {
		before := l.Succeeded()
		Eventually(l.Succeeded).Should(BeNumerically(">", before+5), name)
	}
	mark := strconv.FormatInt(time.Now().UnixNano(), 10)
	for _, cluster := range clusterNames() {
		setStreamMark(cluster, mark)
	}
	endedOf, all := map[string]int{}, map[string]int{}
	for name, streams := range loops.streams {
		for _, st := range streams {
			all[st.kind]++
			Eventually(func() bool { done, _ := st.ended(); return done || st.answers(mark) }).WithTimeout(time.Minute).
				Should(BeTrue(), "%s: the %s stream neither ended nor carried a new mark", name, st.kind)
			if done, why := st.ended(); done {
				endedOf[st.kind]++
				GinkgoWriter.Printf("    %s: the %s stream ended: %s\n", name, st.kind, why)
			}
		}
	}
	for kind, n := range all {
		AddReportEntry(kind+" streams "+what+" that ended (the others carried a later mark)", fmt.Sprintf("%d of %d", endedOf[kind], n))
	}
	failed := map[string][]requestloop.Failure{}
	for name, l := range loops.requests {
		ok, failures := l.Stop()
		report("requests "+what+", "+name, ok, failures)
		if len(failures) > 0 {
			failed[name] = failures
		}
	}
	return failed
}

// failedThrough keeps the loops of failed whose name holds way ("user-server", "gRPC frontend").
func failedThrough(failed map[string][]requestloop.Failure, way string) map[string][]requestloop.Failure {
	out := map[string][]requestloop.Failure{}
	for name, f := range failed {
		if strings.Contains(name, way) {
			out[name] = f
		}
	}
	return out
}

// httpConnectConfig is base reaching cluster's kube-apiserver through the proxy-servers' HTTP-CONNECT frontend (its
// NodePort, by its in-cluster name), as curl --proxytunnel does: each connection is a TLS connection to the frontend
// with the hub's proxy-client certificate, a CONNECT to <cluster>:443 (the agent's forward-proxy dialer, over that TLS
// connection), then base's own TLS inside.
func httpConnectConfig(cluster string, base *rest.Config) *rest.Config {
	GinkgoHelper()
	cert, key, ca := hubClientFiles()
	pair := must(tls.LoadX509KeyPair(cert, key))
	pool := x509.NewCertPool()
	Expect(pool.AppendCertsFromPEM(must(os.ReadFile(ca)))).To(BeTrue())
	frontend := net.JoinHostPort(sys.Hub.NodeIP.String(), itoa(localsystem.HTTPConnectNodePort))
	toFrontend := &tls.Dialer{Config: &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool,
		ServerName: frontendServerName, MinVersion: tls.VersionTLS12}}
	// "http": the dialer adds no TLS of its own to the proxy; toFrontend's connection is already TLS.
	viaFrontend := func(*url.URL) (*url.URL, error) { return &url.URL{Scheme: "http", Host: frontend}, nil }
	dial := agent.ForwardProxyDial(viaFrontend, toFrontend.DialContext, nil)
	cfg := rest.CopyConfig(base)
	cfg.Proxy = func(*http.Request) (*url.URL, error) { return nil, nil }
	cfg.Dial = func(c context.Context, _, _ string) (net.Conn, error) {
		return dial(c, "tcp", net.JoinHostPort(cluster, "443"))
	}
	return cfg
}

// streamMark is the namespace whose "mark" label the watches of haLoops follow on every managed cluster (the
// viewer may watch namespaces).
const streamMark = "e2e-stream-mark"

// setStreamMark sets the mark label of cluster's stream-mark namespace, directly on the cluster.
func setStreamMark(cluster, mark string) {
	GinkgoHelper()
	cs := must(kubernetes.NewForConfig(managedConfig(cluster)))
	Eventually(func() error {
		ns, err := cs.CoreV1().Namespaces().Get(ctx(), streamMark, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = cs.CoreV1().Namespaces().Create(ctx(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
				Name: streamMark, Labels: map[string]string{"mark": mark}}}, metav1.CreateOptions{})
			return err
		}
		if err != nil {
			return err
		}
		ns.Labels = map[string]string{"mark": mark}
		_, err = cs.CoreV1().Namespaces().Update(ctx(), ns, metav1.UpdateOptions{})
		return err
	}).Should(Succeed())
}

// startWatchStream watches the stream-mark namespace with cfg; a mark is a change of its label, which haLoops.stop
// makes directly on the cluster (setStreamMark). A watch ends with the message of its error Status, if any.
func startWatchStream(cfg *rest.Config) *longStream {
	GinkgoHelper()
	r := recordWatch(must(must(kubernetes.NewForConfig(cfg)).CoreV1().Namespaces().Watch(ctx(), metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", streamMark).String()})))
	s := &longStream{kind: "watch", answers: func(mark string) bool {
		return slices.ContainsFunc(r.objects(), func(o runtime.Object) bool {
			ns, ok := o.(*corev1.Namespace)
			return ok && ns.Labels["mark"] == mark
		})
	}}
	go func() {
		<-r.done
		var status error
		for _, o := range r.objects() {
			if st, ok := o.(*metav1.Status); ok {
				status = errors.New(st.Message)
			}
		}
		s.end(status)
	}()
	return s
}
