//go:build bench

package dataplane

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/benchmeasure"
)

// Sizes of the phases; together they take about a minute and a half of wall time on 2 cores.
const (
	bulkRounds         = 7
	latencyRounds      = 8
	latencyPerRound    = 250 // 2,000 timed requests per mode
	latencyWarmup      = 100
	concurrentClients  = 64
	concurrencyRounds  = 4
	concurrencyRound   = 2500 * time.Millisecond // 10 s measured per mode
	concurrencyWarmup  = time.Second
	bufferSize         = 64 << 10
	mib                = float64(1 << 20)
	userServerTunnels  = "cluster_proxy_user_server_tunnels_opened_total"
	noTunnels          = -1
	maxErrorsPerReport = 3
)

// errs counts a mode's failed requests and keeps the first few.
type errs struct {
	mu    sync.Mutex
	n     int
	first []string
}

func (e *errs) add(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.n++
	if len(e.first) < maxErrorsPerReport {
		e.first = append(e.first, err.Error())
	}
}

// check fails the test on any error: failed requests are a correctness problem, unlike a missed target.
func (b *bench) check(phase string, r *route, e *errs) {
	if e.n > 0 {
		b.t.Errorf("%s, %s: %d failed requests, first: %q", phase, r.label, e.n, e.first)
	}
}

// fetch GETs path and reads the body; with sum set it also hashes the body.
func fetch(ctx context.Context, rt http.RoundTripper, r *route, path string, buf []byte, sum hash.Hash) (int64, error) {
	resp, err := rt.RoundTrip(r.request(ctx, path))
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	var body io.Reader = resp.Body
	if sum != nil {
		body = io.TeeReader(resp.Body, sum)
	}
	n, err := readAll(body, buf)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return n, err
}

// fetchExactly is fetch that also wants exactly size bytes.
func fetchExactly(ctx context.Context, rt http.RoundTripper, r *route, path string, size int64, buf []byte, sum hash.Hash) error {
	n, err := fetch(ctx, rt, r, path, buf, sum)
	if err == nil && n != size {
		err = fmt.Errorf("GET %s: %d bytes, want %d", path, n, size)
	}
	return err
}

// verifyBody fetches path once and compares the body with want; every mode is checked this way while warming up.
func verifyBody(ctx context.Context, rt http.RoundTripper, r *route, path string, want []byte) error {
	sum := sha256.New()
	if err := fetchExactly(ctx, rt, r, path, int64(len(want)), make([]byte, bufferSize), sum); err != nil {
		return err
	}
	if wantSum := sha256.Sum256(want); !bytes.Equal(sum.Sum(nil), wantSum[:]) {
		return fmt.Errorf("GET %s: the body differs from the target's", path)
	}
	return nil
}

// tunnelsOpened is how many tunnels r has opened so far: those of its dialer or of its own user-server, or the
// world's user-server's for the full path (the proxy-server's metric, less the other user-servers' tunnels).
func (b *bench) tunnelsOpened(r *route) int64 {
	switch {
	case r.tunnels != nil:
		return r.tunnels.Load()
	case r.key == keyFull:
		return int64(metricSum(prometheus.DefaultGatherer, userServerTunnels)) - b.w.ours.extraTunnels.Load()
	}
	return noTunnels
}

// tunnelsSince is how many tunnels r opened since it had opened before, "-" for a route that opens none.
func (b *bench) tunnelsSince(r *route, before int64) string {
	if before < 0 {
		return "-"
	}
	return strconv.FormatInt(b.tunnelsOpened(r)-before, 10)
}

func minMax(v []float64) (lo, hi float64) {
	if len(v) == 0 {
		return 0, 0
	}
	return slices.Min(v), slices.Max(v)
}

func metricSum(g prometheus.Gatherer, name string) float64 {
	families, err := g.Gather()
	if err != nil {
		return 0
	}
	var sum float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			sum += m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	return sum
}

// bulkMode is one mode of the bulk phase and what it measured.
type bulkMode struct {
	r       *route
	rt      *http.Transport
	rates   []float64 // MiB/s per round
	cost    cost
	tunnels int64
	errs    errs
}

// cpuPerTransfer is the process's CPU milliseconds per timed transfer.
func (m *bulkMode) cpuPerTransfer() float64 {
	if len(m.rates) == 0 {
		return 0
	}
	return float64(m.cost.self.Microseconds()) / 1000 / float64(len(m.rates))
}

// bulk GETs 64 MiB per round over one kept-alive connection per mode.
func (b *bench) bulk() {
	buf := make([]byte, bufferSize)
	t := b.transfer("bulk", func(ctx context.Context, m *bulkMode) error {
		return verifyBody(ctx, m.rt, m.r, "/bulk", bulkBody)
	}, func(ctx context.Context, m *bulkMode) error {
		return fetchExactly(ctx, m.rt, m.r, "/bulk", bulkSize, buf, nil)
	})
	b.fig.Bulk = t.figures
	b.sum.bulk = t
	fmt.Fprintf(b.out, "target: full path >= %.0fx raw ANP tunnel: %s %s\n", targetBulk, ratio(t.full, t.anp), verdict(t.full/t.anp, targetBulk, true))
}

// upload POSTs 64 MiB per round over one kept-alive connection per mode: a client's body crosses the path the other
// way, through the transports' and the agent's writes rather than their reads.
func (b *bench) upload() {
	t := b.transfer("upload", func(ctx context.Context, m *bulkMode) error {
		return post(ctx, m.rt, m.r, "/upload?sum=1", hex.EncodeToString(bulkSum[:]))
	}, func(ctx context.Context, m *bulkMode) error {
		return post(ctx, m.rt, m.r, "/upload", strconv.Itoa(bulkSize))
	})
	b.fig.Upload = t.figures
	b.sum.upload = t
}

// transferred is what a transfer phase measured: medians in MiB/s and CPU milliseconds per 64 MiB.
type transferred struct {
	full, anp, links, fullCPU, anpCPU float64
	figures                           []bulkFigures
}

// transfer runs one 64 MiB transfer per mode and round, rounds interleaved, after a warm-up that checks the bytes
// arrived whole; it prints the modes' table.
func (b *bench) transfer(phase string, warmUp, round func(context.Context, *bulkMode) error) transferred {
	ctx := context.Background()
	var modes []*bulkMode
	for _, r := range b.pick(keyDirect, keyANP, keyOursRaw, keyFull, keyLinks) {
		m := &bulkMode{r: r, rt: r.transport(1)}
		if err := warmUp(ctx, m); err != nil {
			b.t.Errorf("%s warm-up, %s: %v", phase, r.label, err)
		}
		modes = append(modes, m)
	}
	for _, m := range modes {
		m.tunnels = b.tunnelsOpened(m.r)
	}
	rotate(bulkRounds, modes, func(m *bulkMode, _ int) {
		start := sample()
		err := round(ctx, m)
		c := since(start)
		if err != nil {
			m.errs.add(err)
			return
		}
		m.rates = append(m.rates, bulkSize/mib/c.wall.Seconds())
		m.cost.add(c)
	})

	out := newTable(b.out, "mode", "MiB/s median", "(min-max)", "CPU ms per 64 MiB", "other procs CPU s", "tunnels opened", "vs direct",
		"vs raw ANP", "raw ANP's CPU / this CPU")
	var t transferred
	var direct float64
	for _, m := range modes {
		med := benchmeasure.Median(m.rates)
		switch m.r.key {
		case keyDirect:
			direct = med
		case keyANP:
			t.anp, t.anpCPU = med, m.cpuPerTransfer()
		case keyFull:
			t.full, t.fullCPU = med, m.cpuPerTransfer()
		case keyLinks:
			t.links = med
		}
	}
	for _, m := range modes {
		opened := b.tunnelsSince(m.r, m.tunnels)
		m.rt.CloseIdleConnections()
		med := benchmeasure.Median(m.rates)
		lo, hi := minMax(m.rates)
		out.row(m.r.label, fmt.Sprintf("%.0f", med), fmt.Sprintf("(%.0f-%.0f)", lo, hi), fmt.Sprintf("%.0f", m.cpuPerTransfer()),
			secs(m.cost.other), opened, ratio(med, direct), ratio(med, t.anp), ratio(t.anpCPU, m.cpuPerTransfer()))
		t.figures = append(t.figures, bulkFigures{Mode: m.r.key, MiBPerSecond: med, CPUMillisPer64MiB: m.cpuPerTransfer()})
		b.check(phase, m.r, &m.errs)
	}
	out.flush()
	return t
}

// post sends the 64 MiB body to path and wants want back: the target answers with the bytes it read, or with their
// SHA-256 when path asks for it.
func post(ctx context.Context, rt http.RoundTripper, r *route, path, want string) error {
	req := r.request(ctx, path)
	req.Method = http.MethodPost
	req.Body, req.ContentLength = io.NopCloser(bytes.NewReader(bulkBody)), bulkSize
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	got, err := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	switch {
	case err != nil:
		return err
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("POST %s: %s", path, resp.Status)
	case string(got) != want:
		return fmt.Errorf("POST %s: the target answered %q, want %q", path, got, want)
	}
	return nil
}

// latencyMode is one mode of the latency phase.
type latencyMode struct {
	r       *route
	rt      *http.Transport
	samples []time.Duration
	cost    cost
	tunnels int64
	errs    errs
}

// latency sends 100-byte GETs one after the other over one kept-alive connection per mode.
func (b *bench) latency() {
	ctx := context.Background()
	var modes []*latencyMode
	buf := make([]byte, bufferSize)
	for _, r := range b.pick(keyDirect, keyANP, keyOursRaw, keyFull, keyAudited, keyHubUser, keyAggregated) {
		m := &latencyMode{r: r, rt: r.transport(1)}
		if err := verifyBody(ctx, m.rt, r, "/small", smallBody); err != nil {
			b.t.Errorf("latency warm-up, %s: %v", r.label, err)
		}
		for range latencyWarmup {
			_ = fetchExactly(ctx, m.rt, r, "/small", smallSize, buf, nil)
		}
		m.tunnels = b.tunnelsOpened(r)
		modes = append(modes, m)
	}
	rotate(latencyRounds, modes, func(m *latencyMode, _ int) {
		start := sample()
		for range latencyPerRound {
			t0 := time.Now()
			if err := fetchExactly(ctx, m.rt, m.r, "/small", smallSize, buf, nil); err != nil {
				m.errs.add(err)
				continue
			}
			m.samples = append(m.samples, time.Since(t0))
		}
		m.cost.add(since(start))
	})

	p50 := map[string]time.Duration{}
	p99 := map[string]time.Duration{}
	for _, m := range modes {
		slices.Sort(m.samples)
		p50[m.r.key], p99[m.r.key] = percentile(m.samples, 50), percentile(m.samples, 99)
	}
	out := newTable(b.out, "mode", "requests", "p50 us", "p90 us", "p99 us", "CPU us per request", "other procs CPU s", "tunnels opened",
		"p50 vs raw ANP", "p99 vs raw ANP")
	for _, m := range modes {
		opened := b.tunnelsSince(m.r, m.tunnels)
		m.rt.CloseIdleConnections()
		cpu := "-"
		if len(m.samples) > 0 {
			cpu = us(m.cost.self / time.Duration(len(m.samples)))
		}
		out.row(m.r.label, strconv.Itoa(len(m.samples)), us(p50[m.r.key]), us(percentile(m.samples, 90)), us(p99[m.r.key]), cpu,
			secs(m.cost.other), opened,
			ratio(float64(p50[m.r.key]), float64(p50[keyANP])), ratio(float64(p99[m.r.key]), float64(p99[keyANP])))
		b.fig.Latency = append(b.fig.Latency, latencyFigures{Mode: m.r.key, P50Micros: micros(p50[m.r.key]), P99Micros: micros(p99[m.r.key])})
		b.check("latency", m.r, &m.errs)
	}
	out.flush()
	b.sum.latFull, b.sum.latANP, b.sum.latAudited = p50[keyFull], p50[keyANP], p50[keyAudited]
	b.sum.latFull99, b.sum.latANP99 = p99[keyFull], p99[keyANP]
	b.sum.latHubUser, b.sum.latAggregated = p50[keyHubUser], p50[keyAggregated]
	if b.sum.latHubHop = b.hubHop(); b.sum.latHubHop > 0 {
		fmt.Fprintf(b.out, "the hub kube-apiserver's hop alone (GET clusters/%s, answered by the gateway from memory, same token): p50 %s us\n",
			cluster, us(b.sum.latHubHop))
	}
	fmt.Fprintf(b.out, "target: full path p50 <= %.0fx raw reused ANP tunnel's: %s %s\n", targetLatencyP50,
		ratio(float64(p50[keyFull]), float64(p50[keyANP])), verdict(float64(p50[keyFull])/float64(p50[keyANP]), targetLatencyP50, false))
	if p50[keyAudited] > 0 {
		fmt.Fprintf(b.out, "target: audited full path: p50 <= %.1fx full path: %s %s\n", targetAuditedP50,
			ratio(float64(p50[keyAudited]), float64(p50[keyFull])), verdict(float64(p50[keyAudited])/float64(p50[keyFull]), targetAuditedP50, false))
	}
	b.checkAudited("latency")
}

// concurrencyMode is one mode of the concurrency phase.
type concurrencyMode struct {
	r        *route
	rt       *http.Transport // shared by the clients; nil when every request gets its own
	requests int
	rates    []float64 // requests/s per round
	samples  []time.Duration
	cost     cost
	tunnels  int64
	errs     errs
}

// do sends one request the mode's way: over the shared pool, or over a new tunnel and transport that are closed
// afterwards.
func (m *concurrencyMode) do(ctx context.Context, buf []byte) error {
	if m.rt != nil {
		return fetchExactly(ctx, m.rt, m.r, "/small", smallSize, buf, nil)
	}
	rt := m.r.transport(1)
	defer rt.CloseIdleConnections()
	return fetchExactly(ctx, rt, m.r, "/small", smallSize, buf, nil)
}

// run has the clients loop for period and returns how many requests completed, their latencies and the cost.
func (m *concurrencyMode) run(period time.Duration) (int, []time.Duration, cost) {
	ctx := context.Background()
	start := sample()
	deadline := start.at.Add(period)
	var wg sync.WaitGroup
	results := make([][]time.Duration, concurrentClients)
	for i := range concurrentClients {
		wg.Go(func() {
			buf := make([]byte, 4<<10)
			for time.Now().Before(deadline) {
				t0 := time.Now()
				if err := m.do(ctx, buf); err != nil {
					m.errs.add(err)
					continue
				}
				results[i] = append(results[i], time.Since(t0))
			}
		})
	}
	wg.Wait()
	c := since(start)
	all := slices.Concat(results...)
	return len(all), all, c
}

// concurrency has 64 clients loop GETs of 100 bytes for a fixed period per mode.
func (b *bench) concurrency() {
	var modes []*concurrencyMode
	for _, r := range b.pick(keyDirectPool, keyANPPool, keyANPPerReq, keyANPPerRSA, keyFull, keyAudited, keyHubUser, keyAggregated) {
		m := &concurrencyMode{r: r}
		if r.key != keyANPPerReq && r.key != keyANPPerRSA {
			m.rt = r.transport(concurrentClients)
		}
		check := r.transport(1)
		if err := verifyBody(context.Background(), check, r, "/small", smallBody); err != nil {
			b.t.Errorf("concurrency warm-up, %s: %v", r.label, err)
		}
		check.CloseIdleConnections()
		m.run(concurrencyWarmup) // fills the pools
		m.errs = errs{}          // warm-up failures show in the timed runs too
		m.tunnels = b.tunnelsOpened(r)
		modes = append(modes, m)
	}
	rotate(concurrencyRounds, modes, func(m *concurrencyMode, _ int) {
		n, samples, c := m.run(concurrencyRound)
		m.requests += n
		m.samples = append(m.samples, samples...)
		m.rates = append(m.rates, float64(n)/c.wall.Seconds())
		m.cost.add(c)
	})

	rate := map[string]float64{}
	cpuPerRequest := map[string]float64{}      // microseconds, this process
	otherCPUPerRequest := map[string]float64{} // microseconds, the other processes (the hub kube-apiserver in the hub modes)
	for _, m := range modes {
		if m.cost.wall > 0 {
			rate[m.r.key] = float64(m.requests) / m.cost.wall.Seconds()
		}
		if m.requests > 0 {
			cpuPerRequest[m.r.key] = float64(m.cost.self.Microseconds()) / float64(m.requests)
			otherCPUPerRequest[m.r.key] = float64(m.cost.other.Microseconds()) / float64(m.requests)
		}
	}
	out := newTable(b.out, "mode", "req/s", "(rounds)", "p50 us", "p99 us", "CPU us per request", "other procs CPU s", "tunnels opened",
		"errors", "vs per-request tunnel")
	for _, m := range modes {
		opened := b.tunnelsSince(m.r, m.tunnels)
		if m.rt != nil {
			m.rt.CloseIdleConnections()
		}
		slices.Sort(m.samples)
		rounds := make([]string, len(m.rates))
		for i, r := range m.rates {
			rounds[i] = fmt.Sprintf("%.0f", r)
		}
		cpu := "-"
		if m.requests > 0 {
			cpu = us(m.cost.self / time.Duration(m.requests))
		}
		out.row(m.r.label, fmt.Sprintf("%.0f", rate[m.r.key]), "("+strings.Join(rounds, ", ")+")", us(percentile(m.samples, 50)),
			us(percentile(m.samples, 99)), cpu, secs(m.cost.other), opened, strconv.Itoa(m.errs.n),
			ratio(rate[m.r.key], rate[keyANPPerReq]))
		b.fig.Concurrency = append(b.fig.Concurrency, concurrencyFigures{Mode: m.r.key, RequestsPerSecond: rate[m.r.key],
			CPUMicrosPerRequest: cpuPerRequest[m.r.key]})
		b.check("concurrency", m.r, &m.errs)
	}
	out.flush()
	b.sum.concFull, b.sum.concPerReq, b.sum.concPerReqRSA, b.sum.concANPPool = rate[keyFull], rate[keyANPPerReq], rate[keyANPPerRSA], rate[keyANPPool]
	b.sum.concFullCPU, b.sum.concPerReqCPU = cpuPerRequest[keyFull], cpuPerRequest[keyANPPerReq]
	b.sum.concAudited, b.sum.concAuditedCPU = rate[keyAudited], cpuPerRequest[keyAudited]
	b.sum.concHubUser, b.sum.concAggregated = rate[keyHubUser], rate[keyAggregated]
	b.sum.concHubUserCPU, b.sum.concAggregatedCPU = cpuPerRequest[keyHubUser], cpuPerRequest[keyAggregated]
	b.sum.concAggregatedOtherCPU = otherCPUPerRequest[keyAggregated]
	fmt.Fprintf(b.out, "target: full path >= %.0fx the requests/s of a new tunnel per request: %s %s\n", targetConcurrency,
		ratio(rate[keyFull], rate[keyANPPerReq]), verdict(rate[keyFull]/rate[keyANPPerReq], targetConcurrency, true))
	fmt.Fprintf(b.out, "target: full path >= %.0fx the requests/s of 64 reused raw ANP tunnels: %s %s\n", targetPooled,
		ratio(rate[keyFull], rate[keyANPPool]), verdict(rate[keyFull]/rate[keyANPPool], targetPooled, true))
	if rate[keyAudited] > 0 {
		fmt.Fprintf(b.out, "target: audited full path: requests/s >= %.1fx full path: %s %s\n", targetAuditedRate,
			ratio(rate[keyAudited], rate[keyFull]), verdict(rate[keyAudited]/rate[keyFull], targetAuditedRate, true))
	}
	b.checkAudited("concurrency")
}
