//go:build e2e

package e2e

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"maps"
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
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/agent"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/localsystem"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/requestloop"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/soak"
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

// The ways in to a managed cluster that the request loops take.
const (
	wayUserServer  = "user-server"
	wayGRPC        = "gRPC frontend"
	wayHTTPConnect = "HTTP-CONNECT frontend"
	wayHub         = "hub's aggregated API"
)

// haLoops are request loops to every managed cluster through every way in: the hub's aggregated API (the hub
// kube-apiserver in front, as the hub admin), the user-server Service, and the proxy-servers' gRPC frontend
// (pkg/clusterproxy) and HTTP-CONNECT frontend.
type haLoops struct {
	requests map[loopName]*requestloop.Loop
	// streams are the long-lived streams of the case, each started once: a watch of a namespace on every cluster
	// through every way in, and an exec into, a followed log of and a port-forward to the probe pod through every way
	// that carries them.
	streams []*longStream
}

// loopName names a loop by the cluster it reaches and its way in.
type loopName struct{ cluster, way string }

func (n loopName) String() string { return n.cluster + " through the " + n.way }

// wayIn is one way in to a managed cluster: requests is the config of its request loop and its watch; streams gives
// the config of its exec, followed log and port-forward as each opens (nil: the way carries none).
type wayIn struct {
	requests *rest.Config
	streams  func() (*rest.Config, error)
}

// always gives cfg every time.
func always(cfg *rest.Config) func() (*rest.Config, error) {
	return func() (*rest.Config, error) { return cfg, nil }
}

// haWays are the ways in to cluster of the high-availability specs, with credentials read once, through p.
func haWays(p *clusterproxy.Client, cluster string) map[string]wayIn {
	GinkgoHelper()
	base := rest.CopyConfig(managedConfig(cluster))
	base.Host = "https://kubernetes.default.svc"
	user := userRESTConfig(userKubeconfig(cluster, "viewer", viewerToken(cluster)))
	grpc := must(p.RESTConfig(cluster, base))
	hub := must(clusterproxy.RESTConfigViaHub(rest.CopyConfig(sys.Hub.Config), cluster))
	return map[string]wayIn{
		wayUserServer: {requests: user, streams: always(user)},
		wayGRPC:       {requests: grpc, streams: always(grpc)},
		// client-go's upgrade transports use cfg.Proxy, which this way has not.
		wayHTTPConnect: {requests: httpConnectConfig(cluster, base)},
		wayHub:         {requests: hub, streams: always(hub)},
	}
}

// everyWay is every cluster's ways in, waysInto giving one cluster's by their names.
func everyWay(waysInto func(cluster string) map[string]wayIn) map[loopName]wayIn {
	GinkgoHelper()
	out := map[loopName]wayIn{}
	for _, cluster := range clusterNames() {
		for way, in := range waysInto(cluster) {
			out[loopName{cluster: cluster, way: way}] = in
		}
	}
	return out
}

// startHALoops starts a loop every 100 ms per cluster and way in, and waits for each to answer, then the long-lived
// streams of every way, once each.
func startHALoops() haLoops {
	GinkgoHelper()
	p := proxies()
	ways := everyWay(func(cluster string) map[string]wayIn { return haWays(p, cluster) })
	loops := haLoops{requests: startRequestLoops(ways)}
	for _, cluster := range clusterNames() {
		setStreamMark(cluster, "start")
	}
	for _, slot := range streamSlots(ways) {
		loops.streams = append(loops.streams, startStream(slot))
	}
	return loops
}

// startRequestLoops starts a request loop every 100 ms through each of ways, and waits for each to answer.
func startRequestLoops(ways map[loopName]wayIn) map[loopName]*requestloop.Loop {
	GinkgoHelper()
	loops := map[loopName]*requestloop.Loop{}
	for name, way := range ways {
		l := must(requestloop.Start(way.requests, 100*time.Millisecond))
		DeferCleanup(func() { l.Stop() })
		loops[name] = l
	}
	for name, l := range loops {
		Eventually(l.Succeeded).Should(BeNumerically(">", 5), name.String())
	}
	return loops
}

// streamSlots are the long-lived streams of every way of ways, by cluster and way.
func streamSlots(ways map[loopName]wayIn) []streamSlot {
	GinkgoHelper()
	var out []streamSlot
	for _, name := range slices.SortedFunc(maps.Keys(ways), func(a, b loopName) int {
		return cmp.Or(cmp.Compare(a.cluster, b.cluster), cmp.Compare(a.way, b.way))
	}) {
		out = append(out, streamSlotsOf(name, ways[name])...)
	}
	return out
}

// startStream opens a stream of slot for the rest of the spec, and waits until it carries the mark "start".
func startStream(slot streamSlot) *longStream {
	GinkgoHelper()
	s, err := slot.open(ctx())
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(s.close)
	Eventually(func() bool { return s.Carries("start") }).Should(BeTrue(), slot.String())
	return s
}

// stop lets every loop answer a few more requests, stops them, reports their counts and returns the failed requests
// by loop.
//
// Each stream must then either have ended or carry a new mark (markStreams): a stream whose proxy-server went away
// ends, it never hangs. How many ended, of each kind, is reported with the errors they ended with.
func (loops haLoops) stop(what string) map[string][]requestloop.Failure {
	GinkgoHelper()
	for name, l := range loops.requests {
		before := l.Succeeded()
		Eventually(l.Succeeded).Should(BeNumerically(">", before+5), name.String())
	}
	endedOf, all := map[string]int{}, map[string]int{}
	for i, outcome := range loops.markStreams(time.Minute) {
		st := loops.streams[i]
		all[st.kind]++
		Expect(outcome).NotTo(Equal(soak.StreamHung), "%s neither ended nor carried a new mark", st)
		if outcome == soak.StreamEnded {
			endedOf[st.kind]++
			GinkgoWriter.Printf("    %s ended: %s\n", st, st.why())
		}
	}
	for kind, n := range all {
		AddReportEntry(kind+" streams "+what+" that ended (the others carried a later mark)", fmt.Sprintf("%d of %d", endedOf[kind], n))
	}
	failed := map[string][]requestloop.Failure{}
	for name, l := range loops.requests {
		ok, failures := l.Stop()
		report("requests "+what+", "+name.String(), ok, failures)
		if len(failures) > 0 {
			failed[name.String()] = failures
		}
	}
	return failed
}

// markStreams sets a new mark on every cluster and gives every stream up to within to end or to carry it, and returns
// what each did, in the order of loops.streams (soak.Probe).
func (loops haLoops) markStreams(within time.Duration) []string {
	GinkgoHelper()
	mark := strconv.FormatInt(time.Now().UnixNano(), 10)
	for _, cluster := range clusterNames() {
		setStreamMark(cluster, mark)
	}
	return soak.Probe(clock.RealClock{}, mark, within, interval, probed(loops.streams))
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
	return httpConnectConfigWith(cluster, base, &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool,
		ServerName: frontendServerName, MinVersion: tls.VersionTLS12})
}

// httpConnectConfigWith is httpConnectConfig with toFrontend the TLS of each connection to the frontend.
func httpConnectConfigWith(cluster string, base *rest.Config, toFrontend *tls.Config) *rest.Config {
	frontend := net.JoinHostPort(sys.Hub.NodeIP.String(), itoa(localsystem.HTTPConnectNodePort))
	dialer := &tls.Dialer{Config: toFrontend}
	// "http": the dialer adds no TLS of its own to the proxy; the dialer's connection is already TLS.
	viaFrontend := func(*url.URL) (*url.URL, error) { return &url.URL{Scheme: "http", Host: frontend}, nil }
	dial := agent.ForwardProxyDial(viaFrontend, dialer.DialContext, nil)
	cfg := rest.CopyConfig(base)
	cfg.Proxy = func(*http.Request) (*url.URL, error) { return nil, nil }
	cfg.Dial = func(c context.Context, _, _ string) (net.Conn, error) {
		return dial(c, "tcp", net.JoinHostPort(cluster, "443"))
	}
	return cfg
}

// streamMark is the namespace whose "mark" label the watches of the long-lived streams follow on every managed
// cluster (the viewer may watch namespaces).
const streamMark = "e2e-stream-mark"

// setStreamMark sets the mark label of cluster's stream-mark namespace, directly on the cluster.
func setStreamMark(cluster, mark string) {
	GinkgoHelper()
	Eventually(func() error { return writeStreamMark(ctx(), cluster, mark) }).Should(Succeed())
}

// writeStreamMark is one attempt of setStreamMark, which fails while the cluster is off the network.
func writeStreamMark(c context.Context, cluster, mark string) error {
	cs, err := kubernetes.NewForConfig(managedConfig(cluster))
	if err != nil {
		return err
	}
	c, cancel := context.WithTimeout(c, markRequestTimeout)
	defer cancel()
	ns, err := cs.CoreV1().Namespaces().Get(c, streamMark, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = cs.CoreV1().Namespaces().Create(c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
			Name: streamMark, Labels: map[string]string{"mark": mark}}}, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	ns.Labels = map[string]string{"mark": mark}
	_, err = cs.CoreV1().Namespaces().Update(c, ns, metav1.UpdateOptions{})
	return err
}
