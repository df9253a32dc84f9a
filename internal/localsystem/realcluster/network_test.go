package realcluster

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"golang.org/x/sys/unix"
)

// TestDisconnectCutsTheClusterOffAndReconnectRestoresItsNetwork runs on a namespace and veth pair made as a cluster's
// (createVethPair), without a node: it needs root and iproute2, nothing else.
func TestDisconnectCutsTheClusterOffAndReconnectRestoresItsNetwork(t *testing.T) {
	g := NewWithT(t)
	c := testNetwork(t)
	node := listen(t, c, c.NodeIP)
	machine := listen(t, nil, c.HostIP)
	g.Eventually(func() error { return dial(nil, node) }).WithTimeout(3*time.Second).Should(Succeed(), "the machine reaches the node")
	g.Eventually(func() error { return dial(c, machine) }).WithTimeout(3*time.Second).Should(Succeed(), "the node reaches the machine")
	before := routes(t, c)
	g.Expect(before["machine, main table"]).To(ContainSubstring("proto kernel scope link src "+c.HostIP.String()), "the routes the test compares")
	g.Expect(before["machine, local table"]).To(ContainSubstring("local " + c.HostIP.String()))
	g.Expect(before["node, main table"]).To(ContainSubstring("dev eth0 proto kernel scope link src " + c.NodeIP.String()))
	g.Expect(before["node, local table"]).To(ContainSubstring("local " + c.NodeIP.String()))

	g.Expect(c.Disconnect()).To(Succeed())
	g.Expect(dial(nil, node)).NotTo(Succeed(), "the machine cannot reach the node")
	g.Expect(dial(c, machine)).NotTo(Succeed(), "the node cannot reach the machine")
	g.Expect(routes(t, c)["machine, main table"]).To(BeEmpty(), "the machine's route through the veth is gone: the guard's blackhole takes the packets")

	g.Expect(c.Reconnect()).To(Succeed())
	g.Eventually(func() map[string]string { return routes(t, c) }).WithTimeout(3*time.Second).Should(Equal(before),
		"both ends have the routes of before the cut")
	g.Eventually(func() error { return dial(nil, node) }).WithTimeout(3*time.Second).Should(Succeed(), "the machine reaches the node again")
	g.Eventually(func() error { return dial(c, machine) }).WithTimeout(3*time.Second).Should(Succeed(), "the node reaches the machine again")
}

// testNetwork makes a cluster's namespace and veth pair without its node, named cpotest-<pid in hex> so that nothing
// of a real cluster's (cpo-) can clash with it, on a /24 of 198.18.0.0/15 (the range for benchmarks) that no test
// running beside it holds: its blackhole route, under the veth's own as the guard route is under the clusters', keeps
// the packets for the namespace on the machine while it is cut off. Everything is removed when the test ends, however
// it ends.
func testNetwork(t *testing.T) *Cluster {
	t.Helper()
	c := &Cluster{name: fmt.Sprintf("cpotest-%x", os.Getpid())}
	var guard []string
	t.Cleanup(func() {
		// Deleting the machine's end takes the node's with it; a namespace goes with its last process.
		_ = runIP("link", "del", c.name)
		_ = runIP("netns", "del", c.name)
		if guard != nil {
			guard[1] = "del"
			if err := runIP(guard...); err != nil {
				t.Errorf("remove the test's guard route: %v", err)
			}
		}
		if _, err := net.InterfaceByName(c.name); err == nil {
			t.Errorf("the veth %s is still there", c.name)
		}
		if _, err := os.Stat(c.NetNS()); err == nil {
			t.Errorf("the namespace %s is still there", c.name)
		}
	})
	for attempt := 0; guard == nil; attempt++ {
		n := rand.IntN(512)
		c.HostIP, c.NodeIP = net.IPv4(198, byte(18+n/256), byte(n%256), 1).To4(), net.IPv4(198, byte(18+n/256), byte(n%256), 2).To4()
		subnet := fmt.Sprintf("%s/24", c.HostIP.Mask(net.CIDRMask(24, 32)))
		out, err := exec.Command("ip", "route", "show", "exact", subnet).CombinedOutput()
		if err != nil {
			t.Fatalf("ip route show exact %s (the test needs root and iproute2): %v: %s", subnet, err, out)
		}
		if strings.TrimSpace(string(out)) != "" {
			continue // a test beside this one holds it
		}
		// "add" fails when the route exists: a test that started meanwhile holds it.
		args := []string{"route", "add", "blackhole", subnet, "metric", "4000"}
		if err := runIP(args...); err == nil {
			guard = args
		} else if attempt == 20 {
			t.Fatalf("no free /24 in 198.18.0.0/15 (the test needs root and iproute2): %v", err)
		}
	}
	if err := c.createVethPair(); err != nil {
		t.Fatalf("make the namespace and its veth pair (the test needs root and iproute2): %v", err)
	}
	return c
}

// routes are the routes of both ends of c's veth: the machine's through it, and every route of the namespace, in the
// main table and in the local one (the addresses' own).
func routes(t *testing.T, c *Cluster) map[string]string {
	t.Helper()
	out := map[string]string{}
	for name, args := range map[string][]string{
		"machine, main table":  {"route", "show", "dev", c.name},
		"machine, local table": {"route", "show", "table", "local", "dev", c.name},
		"node, main table":     {"-n", c.name, "route", "show"},
		"node, local table":    {"-n", c.name, "route", "show", "table", "local"},
	} {
		raw, err := exec.Command("ip", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, raw)
		}
		out[name] = strings.TrimSpace(string(raw))
	}
	return out
}

// listen accepts connections on ip, on a free port, in c's namespace (nil: on the machine), and closes each at once,
// until the test ends; it returns its address.
func listen(t *testing.T, c *Cluster, ip net.IP) string {
	t.Helper()
	var l net.Listener
	err := inNamespaceOf(c, func() (err error) {
		l, err = net.Listen("tcp", net.JoinHostPort(ip.String(), "0"))
		return err
	})
	if err != nil {
		t.Fatalf("listen on %s: %v", ip, err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			_ = conn.Close()
		}
	}()
	return l.Addr().String()
}

// dial connects to addr from c's namespace (nil: from the machine), giving up after half a second.
func dial(c *Cluster, addr string) error {
	return inNamespaceOf(c, func() error {
		conn, err := net.DialTimeout("tcp", addr, 500*time.Millisecond)
		if err != nil {
			return err
		}
		return conn.Close()
	})
}

// inNamespaceOf runs f in c's network namespace (nil: on the machine): on an OS thread of its own that joined it, so
// that the sockets f makes belong to it for their whole life. The thread is never given back to other goroutines; it
// ends with f's.
func inNamespaceOf(c *Cluster, f func() error) error {
	if c == nil {
		return f()
	}
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		ns, err := os.Open(c.NetNS())
		if err != nil {
			done <- err
			return
		}
		defer func() { _ = ns.Close() }()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			done <- fmt.Errorf("join the network namespace %s: %w", c.name, err)
			return
		}
		done <- f()
	}()
	return <-done
}
