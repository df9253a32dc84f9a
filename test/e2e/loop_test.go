//go:build e2e

package e2e

import (
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/client-go/rest"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/requestloop"
)

// report writes a loop's figures to the spec's output.
func report(what string, ok int, failures []requestloop.Failure) {
	AddReportEntry(what, fmt.Sprintf("%d answered, %d failed, failures over %s", ok, len(failures),
		requestloop.Gap(failures).Round(10*time.Millisecond)))
	for _, f := range failures {
		GinkgoWriter.Printf("    %s %s\n", f.At.Format("15:04:05.000"), f.Err)
	}
}

// haLoops are request loops to every managed cluster through both ways in: the user-server Service, and the
// proxy-servers' gRPC frontend (pkg/clusterproxy).
type haLoops map[string]*requestloop.Loop

// startHALoops starts a loop every 100 ms per cluster and way in, and waits for each to answer.
func startHALoops() haLoops {
	GinkgoHelper()
	p := proxies()
	loops := haLoops{}
	for _, cluster := range clusterNames() {
		base := rest.CopyConfig(managedConfig(cluster))
		base.Host = "https://kubernetes.default.svc"
		for way, cfg := range map[string]*rest.Config{
			"user-server":   userRESTConfig(userKubeconfig(cluster, "viewer", viewerToken(cluster))),
			"gRPC frontend": must(p.RESTConfig(cluster, base)),
		} {
			l := must(requestloop.Start(cfg, 100*time.Millisecond))
			DeferCleanup(func() { l.Stop() })
			loops[cluster+" through the "+way] = l
		}
	}
	for name, l := range loops {
		Eventually(l.Succeeded).Should(BeNumerically(">", 5), name)
	}
	return loops
}

// stop lets every loop answer a few more requests, stops them, reports their counts and returns the failed requests
// by loop.
func (loops haLoops) stop(what string) map[string][]requestloop.Failure {
	GinkgoHelper()
	for name, l := range loops {
		before := l.Succeeded()
		Eventually(l.Succeeded).Should(BeNumerically(">", before+5), name)
	}
	failed := map[string][]requestloop.Failure{}
	for name, l := range loops {
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
