//go:build bench

// Package dataplane measures the data plane against its baseline, side by side in one process on 127.0.0.1:
// apiserver-network-proxy v0.36.0 at default settings (its ProxyServer with the destHost strategy, mTLS gRPC frontend
// and agent endpoint, its own agent, konnectivity-client tunnels) and our full path (an HTTPS client, the
// user-server, the in-process tunnel, our proxy-server, our agent over mTLS, the in-process service-proxy, the target
// as an allow-listed service). Our raw tunnel (konnectivity-client through our proxy-server to our agent) is shown
// as a diagnostic. The hub modes run a hub kube-apiserver (envtest's, KUBEBUILDER_ASSETS) with its front proxy, which
// serves the aggregated API of this process through an APIService: a hub ServiceAccount reaches the cluster's
// kube-apiserver (an HTTPS target) as impersonation, with its token to the user-server (hub-user) and through the hub
// kube-apiserver (aggregated), in the latency and concurrency phases. Every certificate of every mode is ECDSA P-256 from internal/certs, except one extra row of the
// 64-client phase: the per-request baseline with RSA-2048 certificates, the key type of the anchor figures (docs/performance.md#targets).
// The audited mode is the full path through a second user-server of the same proxy-server, built as the first and with
// an audit.Auditor at its defaults (Metadata level, one event a request, written to a file before the request ends);
// it runs in the latency and concurrency phases next to the full path, and its events are counted against its requests.
//
// Phases: bulk throughput (GET 64 MiB), small-request latency (GET 100 B one after the other), 64 concurrent clients
// for a fixed period, 1,000 concurrent streams through one agent with a goroutine leak check, uploads (POST 64 MiB),
// bounds (slow readers, made-up tokens), and execs streaming 100 MiB of stdout through the full path to the
// kube-apiserver stand-in (websocket and SPDY, client-go's executors), through the world's user-server and through a
// second one that records sessions (sessionrec to a directory), each recording checked whole. Modes run in
// interleaved rounds whose order rotates, warmed up first, with a GC before each timed round; CPU per unit is the
// whole process's getrusage, and the other processes' CPU (from /proc/stat) shows how noisy the machine was.
// docs/data-plane.md describes the path; /work/shared/notes/anp-dataplane-figures.md the method and earlier figures.
//
// The targets (docs/performance.md#targets; auditing and recording: docs/audit.md#what-it-costs) are printed as PASS
// or MISS beside the measured ratio and never asserted: timed assertions flake on a shared machine. The test fails
// only on correctness problems: failed requests, wrong bodies, streams that stall, goroutines that do not come back,
// audit events or recordings that miss requests or bytes. Run it with 'make bench-data-plane'. BENCH_PHASES
// (bulk,latency,concurrency,streams,upload,bounds,exec) and BENCH_MODES (direct,direct-pool,anp,anp-pool,
// anp-per-request,anp-per-request-rsa,ours-raw,full,audited,links,hub-user,aggregated; the hub starts only for the
// last two; the exec phase has modes of its own) narrow a run, e.g. for a CPU profile of one mode:
//
//	BENCH_PHASES=bulk BENCH_MODES=full go test -tags bench ./test/bench/dataplane -run '^TestDataPlane$' -count=1 -v -cpuprofile /tmp/full.prof
//
// Figures are printed and written as JSON to BENCH_OUT (default bin/bench/dataplane.json), and drawn beside it, for the
// phases that ran, as dataplane-bulk.svg, dataplane-latency.svg, dataplane-concurrency.svg, dataplane-upload.svg and
// dataplane-exec.svg; TestDataPlanePlots draws them again from that file without measuring. BENCH_HEAPPROFILE=<file>
// writes a heap profile once the streams phase has closed everything.
package dataplane

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// Targets from docs/performance.md#targets.
const (
	targetBulk        = 3.0  // full path MiB/s at least this many times a raw ANP tunnel's
	targetLatencyP50  = 1.0  // full path p50 at most this many times a raw reused ANP tunnel's
	targetConcurrency = 10.0 // full path requests/s with 64 clients at least this many times one tunnel per request
	targetPooled      = 1.0  // ... and at least this many times 64 reused raw ANP tunnels'
	// The aggregated path against the user-server path of the same hub user (the extra hop is the hub kube-apiserver).
	targetAggregatedP50  = 1.5 // p50 at most this many times
	targetAggregatedRate = 0.7 // requests/s with 64 clients at least this many times
	// Auditing and session recording (docs/audit.md#what-it-costs), against the full path in the same run.
	targetAuditedRate  = 0.9 // audited full path requests/s with 64 clients at least this many times
	targetAuditedP50   = 1.1 // audited full path small GET p50 at most this many times
	targetRecordedExec = 0.8 // recorded exec MiB/s at least this many times the unrecorded
)

type bench struct {
	t      *testing.T
	w      *world
	routes map[string]*route
	only   map[string]bool // BENCH_MODES; nil runs every mode
	out    io.Writer
	sum    summary
	fig    figures // what is written to BENCH_OUT
}

// summary is what the targets are judged on.
type summary struct {
	bulk, upload                         transferred
	latFull, latANP, latFull99, latANP99 time.Duration
	concFull, concPerReq, concANPPool    float64
	concPerReqRSA                        float64 // req/s of the per-request baseline with RSA-2048 certificates
	concFullCPU, concPerReqCPU           float64 // CPU us per request
	latHubUser, latAggregated            time.Duration
	latHubHop                            time.Duration // p50 of a GET the aggregated API answers itself: the hub's hop alone
	concHubUser, concAggregated          float64
	// CPU us per request of the hub modes with 64 clients: this process's, and the other processes' (the hub
	// kube-apiserver's, mostly) for the aggregated path.
	concHubUserCPU, concAggregatedCPU, concAggregatedOtherCPU float64
	latAudited                                                time.Duration
	concAudited, concAuditedCPU                               float64
	streams                                                   *streamsResult
	exec                                                      *execResult
	phases                                                    []phaseCost
}

type phaseCost struct {
	name string
	cost cost
}

func TestDataPlane(t *testing.T) {
	setup := sample()
	only := list(os.Getenv("BENCH_MODES"))
	w := newWorld(t, only)
	b := &bench{t: t, w: w, routes: w.routes(), only: only, out: os.Stdout,
		fig: figures{Date: time.Now().UTC().Format(time.RFC3339), NumCPU: runtime.NumCPU()}}
	b.header(since(setup))

	phases := list(os.Getenv("BENCH_PHASES"))
	run := func(name, title string, f func()) {
		if phases != nil && !phases[name] {
			return
		}
		fmt.Fprintf(b.out, "\n== %s ==\n", title)
		start := sample()
		f()
		c := since(start)
		b.sum.phases = append(b.sum.phases, phaseCost{name, c})
		fmt.Fprintf(b.out, "phase: wall %s s, our CPU %s s, other processes' CPU %s s\n", secs(c.wall), secs(c.self), secs(c.other))
	}
	run("bulk", fmt.Sprintf("1. Bulk: GET of 64 MiB, one kept-alive connection per mode, %d interleaved rounds (warmed)", bulkRounds), b.bulk)
	run("latency", fmt.Sprintf("2. Latency: GET of 100 B one after the other over one kept-alive connection, %d rounds of %d per mode (warmed)",
		latencyRounds, latencyPerRound), b.latency)
	run("concurrency", fmt.Sprintf("3. Concurrency: %d clients looping GET of 100 B, %d interleaved rounds of %s per mode (warmed)",
		concurrentClients, concurrencyRounds, concurrencyRound), b.concurrency)
	run("streams", fmt.Sprintf("4. Streams: %d idle keep-alive + %d slow chunked streams through one agent via the user-server, held %s",
		streamsEach, streamsEach, holdFor), func() {
		b.sum.streams = b.streams()
		b.reportStreams(b.sum.streams)
	})
	run("upload", fmt.Sprintf("5. Upload: POST of 64 MiB, one kept-alive connection per mode, %d interleaved rounds (warmed)", bulkRounds), b.upload)
	run("bounds", fmt.Sprintf("6. Bounds: a user's %d GETs of 100 B alone, then beside %d slow readers of 64 MiB (1 KiB per %s) "+
		"on the same route, and beside %d made-up tokens for %s", boundsRequests, slowReaders, slowReadEvery, junkTokens, junkFloodFor), b.bounds)
	run("exec", fmt.Sprintf("7. Exec: %d MiB of stdout through the full path per exec, websocket and SPDY, recorded and not, %d interleaved rounds (warmed)",
		execSize>>20, execRounds), func() { b.sum.exec = b.exec() })
	b.footer()
	b.fig.finish(b.sum)
	writeFigures(t, b.fig)
}

// transferRows are the rows of a transfer phase without a target: its floor and its CPU.
func transferRows(out *table, phase string, t transferred) {
	if t.anp > 0 && t.links > 0 {
		out.row(phase+" throughput of the full path's links alone vs raw ANP tunnel (the floor; no target)", fmt.Sprintf("%.0f MiB/s", t.links),
			fmt.Sprintf("%.0f MiB/s", t.anp), ratio(t.links, t.anp), "", "")
	}
	if t.anpCPU > 0 && t.fullCPU > 0 {
		out.row(phase+" CPU per 64 MiB, raw ANP / full path (no target; the figure noise moves least)", fmt.Sprintf("%.0f ms", t.fullCPU),
			fmt.Sprintf("%.0f ms", t.anpCPU), ratio(t.anpCPU, t.fullCPU), "", "")
	}
}

// list parses a comma-separated environment value into a set; empty means nil (everything).
func list(v string) map[string]bool {
	if strings.TrimSpace(v) == "" {
		return nil
	}
	set := map[string]bool{}
	for _, s := range strings.Split(v, ",") {
		set[strings.TrimSpace(s)] = true
	}
	return set
}

// pick returns the routes of keys that BENCH_MODES lets run.
func (b *bench) pick(keys ...string) []*route {
	var out []*route
	for _, k := range keys {
		if b.only == nil || b.only[k] {
			out = append(out, b.routes[k])
		}
	}
	return out
}

func (b *bench) header(setup cost) {
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Fprintf(b.out, "\ndata-plane benchmark: %s %s/%s, GOMAXPROCS %d, NumCPU %d, load average at start %s\n",
		runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.GOMAXPROCS(0), runtime.NumCPU(), strings.Join(strings.Fields(string(load))[:3], " "))
	fmt.Fprintf(b.out, "modules: %s\n", modules("sigs.k8s.io/apiserver-network-proxy", "sigs.k8s.io/apiserver-network-proxy/konnectivity-client", "google.golang.org/grpc"))
	fmt.Fprintln(b.out, "certificates: ECDSA P-256 from internal/certs in every mode (one CA; servers, clients, both agents; our agent's through certs.SignCSR),"+
		" but the extra RSA-2048 per-request row (its own RSA CA, serving and client certificates on a second frontend of the baseline's ProxyServer)")
	fmt.Fprintln(b.out, "clients: HTTP/1.1 keep-alive, compression off; HTTPS to the user-server on the full path, plain HTTP through the tunnel in the raw modes")
	fmt.Fprintln(b.out, "baseline: ANP ProxyServer (destHost, options.NewProxyRunOptions defaults) + ANP pkg/agent (NewGrpcProxyAgentOptions defaults) + konnectivity-client single-use tunnels")
	fmt.Fprintf(b.out, "set-up: wall %s s, our CPU %s s\n", secs(setup.wall), secs(setup.self))
}

// modules reads the versions of paths from the repository's go.mod (test binaries carry no dependency list).
func modules(paths ...string) string {
	raw, _ := os.ReadFile(filepath.Join("..", "..", "..", "go.mod"))
	version := map[string]string{}
	for _, line := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(line); len(f) >= 2 {
			version[f[0]] = f[1]
		}
	}
	var out []string
	for _, p := range paths {
		v := version[p]
		if v == "" {
			v = "unknown"
		}
		out = append(out, p+" "+v)
	}
	return strings.Join(out, ", ")
}

func (b *bench) footer() {
	s := b.sum
	fmt.Fprintln(b.out, "\n== data-plane targets of docs/performance.md and docs/audit.md (ratios measured in this run; printed, not asserted) ==")
	out := newTable(b.out, "target", "full path", "baseline", "ratio", "wanted", "")
	if s.bulk.anp > 0 {
		out.row("bulk throughput vs raw ANP tunnel", fmt.Sprintf("%.0f MiB/s", s.bulk.full), fmt.Sprintf("%.0f MiB/s", s.bulk.anp),
			ratio(s.bulk.full, s.bulk.anp), fmt.Sprintf(">= %.0fx", targetBulk), verdict(s.bulk.full/s.bulk.anp, targetBulk, true))
	}
	transferRows(out, "bulk", s.bulk)
	if s.upload.anp > 0 {
		out.row("upload throughput vs raw ANP tunnel (no target)", fmt.Sprintf("%.0f MiB/s", s.upload.full), fmt.Sprintf("%.0f MiB/s", s.upload.anp),
			ratio(s.upload.full, s.upload.anp), "", "")
	}
	transferRows(out, "upload", s.upload)
	if s.latANP > 0 {
		out.row("small GET p50 vs raw reused ANP tunnel", us(s.latFull)+" us", us(s.latANP)+" us",
			ratio(float64(s.latFull), float64(s.latANP)), fmt.Sprintf("<= %.0fx", targetLatencyP50),
			verdict(float64(s.latFull)/float64(s.latANP), targetLatencyP50, false))
		out.row("small GET p99 vs raw reused ANP tunnel (no target)", us(s.latFull99)+" us", us(s.latANP99)+" us",
			ratio(float64(s.latFull99), float64(s.latANP99)), "", "")
	}
	if s.concPerReq > 0 {
		out.row("64 clients req/s vs new tunnel per request", fmt.Sprintf("%.0f", s.concFull), fmt.Sprintf("%.0f", s.concPerReq),
			ratio(s.concFull, s.concPerReq), fmt.Sprintf(">= %.0fx", targetConcurrency), verdict(s.concFull/s.concPerReq, targetConcurrency, true))
	}
	if s.concPerReqCPU > 0 && s.concFullCPU > 0 {
		out.row("64 clients CPU per request, new tunnel per request / full path (no target; the figure noise moves least)",
			fmt.Sprintf("%.0f us", s.concFullCPU), fmt.Sprintf("%.0f us", s.concPerReqCPU), ratio(s.concPerReqCPU, s.concFullCPU), "", "")
	}
	if s.concPerReqRSA > 0 {
		out.row("64 clients req/s vs new tunnel per request with RSA-2048 certificates (the anchor's key type; no target)",
			fmt.Sprintf("%.0f", s.concFull), fmt.Sprintf("%.0f", s.concPerReqRSA), ratio(s.concFull, s.concPerReqRSA), "", "")
	}
	if s.concANPPool > 0 {
		out.row("64 clients req/s vs 64 reused raw ANP tunnels", fmt.Sprintf("%.0f", s.concFull), fmt.Sprintf("%.0f", s.concANPPool),
			ratio(s.concFull, s.concANPPool), fmt.Sprintf(">= %.0fx", targetPooled), verdict(s.concFull/s.concANPPool, targetPooled, true))
	}
	if s.latAudited > 0 && s.latFull > 0 {
		out.row("audited full path (Metadata, file) small GET p50 vs full path (its column: audited)", us(s.latAudited)+" us", us(s.latFull)+" us",
			ratio(float64(s.latAudited), float64(s.latFull)), fmt.Sprintf("<= %.1fx", targetAuditedP50),
			verdict(float64(s.latAudited)/float64(s.latFull), targetAuditedP50, false))
	}
	if s.concAudited > 0 && s.concFull > 0 {
		out.row("audited full path (Metadata, file) 64 clients req/s vs full path (its column: audited)", fmt.Sprintf("%.0f", s.concAudited),
			fmt.Sprintf("%.0f", s.concFull), ratio(s.concAudited, s.concFull), fmt.Sprintf(">= %.1fx", targetAuditedRate),
			verdict(s.concAudited/s.concFull, targetAuditedRate, true))
		out.row("audited full path 64 clients CPU per request vs full path (no target)", fmt.Sprintf("%.0f us", s.concAuditedCPU),
			fmt.Sprintf("%.0f us", s.concFullCPU), ratio(s.concAuditedCPU, s.concFullCPU), "", "")
	}
	if e := s.exec; e != nil {
		for _, protocol := range []string{execWebSocket, execSPDY} {
			recorded, plain := e.rates[protocol+"-recorded"], e.rates[protocol]
			out.row(fmt.Sprintf("exec of %d MiB over %s, recorded vs not (its column: recorded)", execSize>>20, protocol),
				fmt.Sprintf("%.0f MiB/s", recorded), fmt.Sprintf("%.0f MiB/s", plain), ratio(recorded, plain),
				fmt.Sprintf(">= %.1fx", targetRecordedExec), verdict(recorded/plain, targetRecordedExec, true))
		}
	}
	if s.latHubUser > 0 && s.latAggregated > 0 {
		out.row("aggregated API small GET p50 vs the user-server's, same hub user (its column: aggregated)", us(s.latAggregated)+" us",
			us(s.latHubUser)+" us", ratio(float64(s.latAggregated), float64(s.latHubUser)), fmt.Sprintf("<= %.1fx", targetAggregatedP50),
			verdict(float64(s.latAggregated)/float64(s.latHubUser), targetAggregatedP50, false))
	}
	if s.latHubHop > 0 && s.latAggregated > 0 {
		out.row("aggregated API small GET p50 vs the hub's hop alone: GET clusters/c1, answered from memory (no target)", us(s.latAggregated)+" us",
			us(s.latHubHop)+" us", ratio(float64(s.latAggregated), float64(s.latHubHop)), "", "")
	}
	if s.concHubUser > 0 && s.concAggregated > 0 {
		out.row("aggregated API 64 clients req/s vs the user-server's, same hub user (its column: aggregated)", fmt.Sprintf("%.0f", s.concAggregated),
			fmt.Sprintf("%.0f", s.concHubUser), ratio(s.concAggregated, s.concHubUser), fmt.Sprintf(">= %.1fx", targetAggregatedRate),
			verdict(s.concAggregated/s.concHubUser, targetAggregatedRate, true))
	}
	if s.concAggregatedCPU > 0 && s.concHubUserCPU > 0 {
		out.row("CPU per request, 64 clients: aggregated (ours + other processes, the hub kube-apiserver mostly) vs user-server (no target)",
			fmt.Sprintf("%.0f + %.0f us", s.concAggregatedCPU, s.concAggregatedOtherCPU), fmt.Sprintf("%.0f us", s.concHubUserCPU),
			ratio(s.concAggregatedCPU+s.concAggregatedOtherCPU, s.concHubUserCPU), "", "")
	}
	if r := s.streams; r != nil {
		ok := "PASS"
		if r.errors() > 0 || !r.settled {
			ok = "FAIL"
		}
		out.row("1,000 streams: errors; goroutines before/held/after", fmt.Sprintf("%d; %d/%d/%d", r.errors(), r.goroutines[0], r.goroutines[1], r.goroutines[2]),
			"", "", "0; back to before", ok)
	}
	out.flush()
	var wall, self, other time.Duration
	for _, p := range s.phases {
		wall, self, other = wall+p.cost.wall, self+p.cost.self, other+p.cost.other
	}
	lines, errs := b.w.logs.counts()
	fmt.Fprintf(b.out, "phases: wall %s s, our CPU %s s, other processes' CPU %s s; log lines from ANP and our components: %d, errors: %d\n",
		secs(wall), secs(self), secs(other), lines, len(errs))
	for i, e := range errs {
		if i == 10 {
			fmt.Fprintf(b.out, "  ... %d more\n", len(errs)-i)
			break
		}
		fmt.Fprintf(b.out, "  error log: %s\n", e)
	}
}
