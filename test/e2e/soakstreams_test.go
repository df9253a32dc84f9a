//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/utils/clock"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/soak"
)

const (
	// streamProbeEvery is how often the soak sets a new mark on each cluster; every stream to it must carry the mark
	// within streamProbeWithin, or end.
	streamProbeEvery  = time.Minute
	streamProbeWithin = 30 * time.Second
	// streamRestartBackoff is the pause before a stream that ended, or could not start, is started again.
	streamRestartBackoff = time.Second
	// streamStartWithin bounds the wait for a new stream to carry its cluster's mark; one that ends meanwhile did not
	// start, one that does neither started and is left to the probes.
	streamStartWithin = 30 * time.Second
	// markRetry is the pause between attempts to set a mark on a cluster that is off the network.
	markRetry = 2 * time.Second
)

// streamKeeper keeps a stream of every slot open through a soak. A stream that ends is recorded and replaced. Every
// streamProbeEvery a hang probe sets a new mark on each cluster, which every stream to it must carry within
// streamProbeWithin, or end; one that does neither is recorded as hung, closed and replaced.
type streamKeeper struct {
	book soak.StreamBook
	mu   sync.Mutex
	// marks are the marks last set on each cluster; live the open streams by their id in book.
	marks map[string]string
	live  map[int]*longStream
	// stopStreams ends the streams and their keepers, stopProbes the periodic probes.
	stopStreams, stopProbes context.CancelFunc
	streams, probes         sync.WaitGroup
}

// keepStreams opens a stream of every slot, waits until each is open, and starts the hang probes.
func keepStreams(slots []streamSlot) *streamKeeper {
	GinkgoHelper()
	k := &streamKeeper{marks: map[string]string{}, live: map[int]*longStream{}}
	for _, cluster := range clusterNames() {
		setStreamMark(cluster, "soak-start")
		k.marks[cluster] = "soak-start"
	}
	streams, stopStreams := context.WithCancel(ctx())
	probes, stopProbes := context.WithCancel(streams)
	k.stopStreams, k.stopProbes = stopStreams, stopProbes
	DeferCleanup(k.stop)
	for _, slot := range slots {
		k.streams.Go(func() { k.keep(streams, slot) })
	}
	Eventually(k.open).WithTimeout(3*time.Minute).Should(Equal(len(slots)), "every stream open")
	for _, cluster := range clusterNames() {
		k.probes.Go(func() { k.probeEvery(probes, cluster) })
	}
	return k
}

// open counts the open streams.
func (k *streamKeeper) open() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.live)
}

// keep keeps a stream of slot open until c ends: it starts one, records its end, and after streamRestartBackoff
// starts the next.
func (k *streamKeeper) keep(c context.Context, slot streamSlot) {
	defer GinkgoRecover()
	for {
		s, id, ok := k.start(c, slot)
		if !ok {
			return
		}
		select {
		case <-s.done:
			if k.book.Ended(id, time.Now(), s.why()) {
				progress("%s ended: %s", s, s.why())
			}
		case <-s.closed: // as hung, by a probe, which recorded it
		case <-c.Done():
		}
		k.mu.Lock()
		delete(k.live, id)
		k.mu.Unlock()
		s.close()
		if !pause(c, streamRestartBackoff) {
			return
		}
	}
}

// start opens a stream of slot, trying again after streamRestartBackoff while that fails, and records it as started
// once it carried its cluster's mark, or did neither that nor end within streamStartWithin. It reports false once c
// has ended.
func (k *streamKeeper) start(c context.Context, slot streamSlot) (*longStream, int, bool) {
	for first := true; ; first = false {
		if !first && !pause(c, streamRestartBackoff) {
			return nil, 0, false
		}
		if c.Err() != nil {
			return nil, 0, false
		}
		opened := time.Now()
		s, err := slot.open(c)
		if err != nil {
			k.book.StartFailed(slot.soakSlot())
			continue
		}
		for deadline := time.Now().Add(streamStartWithin); time.Now().Before(deadline); {
			if s.Ended() || s.Carries(k.mark(slot.name.cluster)) || !pause(c, interval) {
				break
			}
		}
		if s.Ended() || c.Err() != nil {
			s.close()
			k.book.StartFailed(slot.soakSlot())
			continue
		}
		id := k.book.Started(slot.soakSlot(), opened)
		k.mu.Lock()
		k.live[id] = s
		k.mu.Unlock()
		return s, id, true
	}
}

// mark is the mark last set on cluster.
func (k *streamKeeper) mark(cluster string) string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.marks[cluster]
}

// probeEvery probes the streams to cluster every streamProbeEvery until c ends.
func (k *streamKeeper) probeEvery(c context.Context, cluster string) {
	defer GinkgoRecover()
	for pause(c, streamProbeEvery) {
		_ = k.probe(c, cluster)
	}
}

// probe sets a new mark on cluster and gives every stream to it open then streamProbeWithin to carry it or to end; it
// records one that did neither as hung and closes it, which replaces it. The mark is set directly on the cluster:
// while the cluster is off the network that fails, and the probe tries again until c ends, so that its time counts
// from when a stream can carry the mark. It returns why it set no mark.
func (k *streamKeeper) probe(c context.Context, cluster string) error {
	mark := strconv.FormatInt(time.Now().UnixNano(), 10)
	for {
		err := writeStreamMark(c, cluster, mark)
		if err == nil {
			break
		}
		if !pause(c, markRetry) {
			return err
		}
	}
	k.mu.Lock()
	k.marks[cluster] = mark
	var ids []int
	var streams []*longStream
	for id, s := range k.live {
		if s.name.cluster == cluster {
			ids, streams = append(ids, id), append(streams, s)
		}
	}
	k.mu.Unlock()
	for i, outcome := range soak.Probe(clock.RealClock{}, mark, streamProbeWithin, interval, probed(streams)) {
		why := fmt.Sprintf("neither ended nor carried mark %s within %s", mark, streamProbeWithin)
		if outcome == soak.StreamHung && k.book.Hung(ids[i], time.Now(), why) {
			progress("%s hung: %s", streams[i], why)
			streams[i].close()
		}
	}
	return nil
}

// finish stops the periodic probes, probes every cluster a last time, and closes the book and every stream. It
// returns why a cluster's last probe set no mark.
func (k *streamKeeper) finish() error {
	k.stopProbes()
	k.probes.Wait()
	last, cancel := context.WithTimeout(ctx(), 3*time.Minute)
	defer cancel()
	var mu sync.Mutex
	var errs []error
	var probes sync.WaitGroup
	for _, cluster := range clusterNames() {
		probes.Go(func() {
			if err := k.probe(last, cluster); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("the last hang probe of %s set no mark: %w", cluster, err))
				mu.Unlock()
			}
		})
	}
	probes.Wait()
	k.stop()
	return errors.Join(errs...)
}

// stop closes the book, then every stream, and waits for their keepers.
func (k *streamKeeper) stop() {
	k.book.Close()
	k.stopStreams()
	k.streams.Wait()
}

// pause waits for d, and reports false, at once, if c ends first.
func pause(c context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-c.Done():
		return false
	case <-t.C:
		return true
	}
}

// progress writes what happens during a soak to the spec's output as it happens, with the time.
func progress(format string, args ...any) {
	GinkgoWriter.Printf("%s %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}
