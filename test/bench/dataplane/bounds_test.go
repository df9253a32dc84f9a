//go:build bench

package dataplane

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Sizes of the bounds phase.
const (
	slowReaders      = 20
	slowReadEvery    = 100 * time.Millisecond
	slowReadSize     = 1 << 10 // 10 KiB/s each: far behind any agent
	boundsRequests   = 300     // a user's requests one after the other, before and beside the load
	boundsTimeout    = 15 * time.Second
	boundsBesideFor  = 30 * time.Second // the most the user's requests beside slow readers take (behind ANP's server)
	slowReadersStart = 5 * time.Second
	slowReadersP99   = 500 * time.Millisecond
	junkTokens       = 4000
	junkSenders      = 32
	junkFloodFor     = 12 * time.Second // longer than the hub reviewer's cache, so the real user's token is reviewed again
	junkP99VsAlone   = 2.0
	boundsWarmup     = 50
	junkTokenPrefix  = "junk-"
	maxJunkRequestIn = 10 * time.Second
)

// bounds measures what a client may cost others: slow readers holding large answers beside a user of the same
// cluster, and a flood of made-up tokens beside a real hub user. Each user's p99 is measured alone and then beside the
// load, in the same run.
func (b *bench) bounds() {
	out := newTable(b.out, "load", "mode", "user p50 alone us", "user p99 alone us", "user p50 beside us", "user p99 beside us",
		"p99 beside / alone", "user failures beside", "target", "verdict")
	for _, r := range b.pick(keyANP, keyOursRaw, keyFull) {
		alone, beside, failed := b.besideSlowReaders(r)
		target, v := "-", "-"
		if r.key != keyANP {
			target = fmt.Sprintf("p99 <= %d ms", slowReadersP99.Milliseconds())
			v = verdict(float64(percentile(beside, 99)), float64(slowReadersP99), false)
		}
		out.row(fmt.Sprintf("%d slow readers of 64 MiB", slowReaders), r.label, us(percentile(alone, 50)), us(percentile(alone, 99)),
			us(percentile(beside, 50)), us(percentile(beside, 99)),
			ratio(float64(percentile(beside, 99)), float64(percentile(alone, 99))), strconv.Itoa(failed), target, v)
	}
	for _, r := range b.pick(keyHubUser) {
		alone, beside, failed, flood := b.besideJunkTokens(r)
		p99Ratio := float64(percentile(beside, 99)) / float64(percentile(alone, 99))
		out.row(fmt.Sprintf("%d made-up tokens (%s)", junkTokens, flood), r.label, us(percentile(alone, 50)), us(percentile(alone, 99)),
			us(percentile(beside, 50)), us(percentile(beside, 99)), fmt.Sprintf("%.2fx", p99Ratio), strconv.Itoa(failed),
			fmt.Sprintf("<= %.0fx", junkP99VsAlone), verdict(p99Ratio, junkP99VsAlone, false))
	}
	out.flush()
}

// userLoop is a user's requests of /small one after the other on one kept-alive connection, after warmup untimed
// ones: n of them, or as many as d allows, whichever ends first. A request that fails counts its time up to the
// failure and is counted.
func userLoop(r *route, warmup, n int, d time.Duration) (samples []time.Duration, failed int, first error) {
	rt := r.transport(1)
	defer rt.CloseIdleConnections()
	buf := make([]byte, bufferSize)
	for range warmup {
		_ = fetchExactly(context.Background(), rt, r, "/small", smallSize, buf, nil)
	}
	for end := time.Now().Add(d); len(samples) < n && time.Now().Before(end); {
		ctx, cancel := context.WithTimeout(context.Background(), boundsTimeout)
		t0 := time.Now()
		err := fetchExactly(ctx, rt, r, "/small", smallSize, buf, nil)
		samples = append(samples, time.Since(t0))
		cancel()
		if err != nil {
			failed++
			if first == nil {
				first = err
			}
		}
	}
	slices.Sort(samples)
	return samples, failed, first
}

// besideSlowReaders measures the user of r alone, then beside slowReaders clients of the same route that each ask for
// /bulk and read 1 KiB every 100 ms.
func (b *bench) besideSlowReaders(r *route) (alone, beside []time.Duration, failed int) {
	alone, failedAlone, first := userLoop(r, boundsWarmup, boundsRequests, boundsBesideFor)
	if failedAlone > 0 {
		b.t.Errorf("bounds, %s: %d of the user's requests failed without any load, first: %v", r.label, failedAlone, first)
	}
	stop := make(chan struct{})
	var started, done sync.WaitGroup
	for range slowReaders {
		started.Add(1)
		done.Go(func() {
			rt := r.transport(1)
			defer rt.CloseIdleConnections()
			resp, err := rt.RoundTrip(r.request(context.Background(), "/bulk"))
			started.Done()
			if err != nil {
				return
			}
			defer func() { _ = resp.Body.Close() }()
			buf := make([]byte, slowReadSize)
			tick := time.NewTicker(slowReadEvery)
			defer tick.Stop()
			for {
				if _, err := resp.Body.Read(buf); err != nil {
					return
				}
				select {
				case <-tick.C:
				case <-stop:
					return
				}
			}
		})
	}
	// Every slow reader has its answer's headers, and the agent is sending their bodies; behind ANP's server, whose
	// loop waits on the first of them, the others may wait for theirs, so not longer than slowReadersStart.
	headers := make(chan struct{})
	go func() {
		started.Wait()
		close(headers)
	}()
	select {
	case <-headers:
	case <-time.After(slowReadersStart):
	}
	beside, failed, _ = userLoop(r, 0, boundsRequests, boundsBesideFor)
	close(stop)
	done.Wait()
	return alone, beside, failed
}

// besideJunkTokens measures the hub user of r alone, then while junkSenders clients send junkTokens requests, each
// with a new made-up token, to the same cluster through the same user-server, for at least junkFloodFor.
func (b *bench) besideJunkTokens(r *route) (alone, beside []time.Duration, failed int, flood string) {
	// Alone for as long as beside: the same window gives both p99s the same chance of a rare pause.
	alone, failedAlone, first := userLoop(r, boundsWarmup, math.MaxInt, junkFloodFor)
	if failedAlone > 0 {
		b.t.Errorf("bounds, %s: %d of the user's requests failed without any load, first: %v", r.label, failedAlone, first)
	}
	var sent, tooMany, unauthorized, other atomic.Int64
	interval := junkFloodFor * junkSenders / junkTokens // each sender's pace, so the flood lasts junkFloodFor
	var wg sync.WaitGroup
	for range junkSenders {
		wg.Go(func() {
			rt := r.transport(1)
			defer rt.CloseIdleConnections()
			tick := time.NewTicker(interval)
			defer tick.Stop()
			for sent.Add(1) <= junkTokens {
				ctx, cancel := context.WithTimeout(context.Background(), maxJunkRequestIn)
				req := r.request(ctx, "/small")
				req.Header.Set("Authorization", "Bearer "+junkTokenPrefix+randomHex())
				resp, err := rt.RoundTrip(req)
				switch {
				case err != nil:
					other.Add(1)
				case resp.StatusCode == http.StatusTooManyRequests:
					tooMany.Add(1)
				case resp.StatusCode == http.StatusUnauthorized:
					unauthorized.Add(1)
				default:
					other.Add(1)
				}
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
				}
				cancel()
				<-tick.C
			}
		})
	}
	beside, failed, _ = userLoop(r, 0, math.MaxInt, junkFloodFor)
	wg.Wait()
	flood = fmt.Sprintf("%d answered 429, %d 401, %d otherwise", tooMany.Load(), unauthorized.Load(), other.Load())
	return alone, beside, failed, flood
}

func randomHex() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
