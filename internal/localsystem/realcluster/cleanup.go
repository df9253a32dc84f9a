package realcluster

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const (
	cgroupRoot = "/sys/fs/cgroup"
	// ownerDir holds, for each cluster namespace in use, the pid of the program that made it: a cluster whose owner
	// is gone is stale and the next Start (or CleanStale) removes it; one whose owner lives is another run's.
	ownerDir = "/run/cluster-proxy-operator-realcluster"
)

// writeOwner records this process as netns's owner.
func writeOwner(netns string) error {
	if err := os.MkdirAll(ownerDir, 0o700); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(ownerDir, netns), []byte(strconv.Itoa(os.Getpid())), 0o600)
}

// ownerAlive reports the pid that owns netns, and whether it is still running (this process included).
func ownerAlive(netns string) (int, bool) {
	data, err := os.ReadFile(filepath.Join(ownerDir, netns))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		return 0, false
	}
	return pid, pid == os.Getpid() || syscall.Kill(pid, 0) == nil
}

// machineLockFile is flock'ed while clusters are recorded, found stale or removed. Runs in other processes start and
// stop clusters at the same time (make e2e beside make e2e-olm): none may take another's cluster, recorded but not yet
// made, for stale, nor drop the guard route while another's clusters start.
const machineLockFile = "/run/lock/cluster-proxy-operator-realcluster.lock"

// lockMachine takes the machine-wide lock of the clusters' records; unlock releases it. Each call opens the file
// anew, so two holders in one process exclude each other as two processes do (flock locks an open file description).
func lockMachine() (unlock func(), err error) {
	if err := os.MkdirAll(filepath.Dir(machineLockFile), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(machineLockFile, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("lock %s: %w", machineLockFile, err)
	}
	return func() { _ = f.Close() }, nil // closing releases the flock
}

// CleanStale removes what a run that was killed left of the clusters it owned: every cpo-* network namespace,
// cgroup and owner record whose owner is gone. index, when not zero, must be free afterwards: a cluster with that
// index that another live run owns is an error naming it.
func CleanStale(index int) error {
	unlock, err := lockMachine()
	if err != nil {
		return err
	}
	defer unlock()
	return cleanStaleLocked(index)
}

// cleanStaleLocked is CleanStale under the machine lock.
func cleanStaleLocked(index int) error {
	names, err := staleCandidates()
	if err != nil {
		return err
	}
	var errs []error
	for _, netns := range names {
		if pid, alive := ownerAlive(netns); alive {
			if netns == prefix+strconv.Itoa(index) {
				errs = append(errs, fmt.Errorf("cluster index %d (network namespace %s) is in use by process %d: stop that run or pick another index", index, netns, pid))
			}
			continue
		}
		if err := removeCluster(netns); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// staleCandidates are the names of every cpo-* namespace, cgroup and owner record on the machine, without the
// ".node" suffix of the daemons' cgroups.
func staleCandidates() ([]string, error) {
	var names []string
	add := func(name string) {
		name = strings.TrimSuffix(strings.TrimSuffix(name, ".node"), ".sock")
		if strings.HasPrefix(name, prefix) && !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	for _, dir := range []string{"/run/netns", ownerDir, filepath.Join(cgroupRoot, "pids"), filepath.Join(cgroupRoot, "memory")} {
		entries, err := os.ReadDir(dir)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		for _, e := range entries {
			add(e.Name())
		}
	}
	return names, nil
}

// removeCluster ends every process of the cluster netns (the namespace's own, and everything in its cgroups: pods and
// their shims), removes its cgroups, then deletes the namespace, which takes its veth, routes and iptables rules
// with it, and its owner record.
func removeCluster(netns string) error {
	var errs []error
	for attempt := 0; ; attempt++ {
		pids := append(namespacePids(netns), cgroupPids(netns)...)
		if len(pids) == 0 {
			break
		}
		if attempt == 50 {
			errs = append(errs, fmt.Errorf("processes of %s do not end: %v", netns, pids))
			break
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := removeCgroups(netns); err != nil {
		errs = append(errs, err)
	}
	if _, err := os.Stat("/run/netns/" + netns); err == nil {
		if out, err := exec.Command("ip", "netns", "delete", netns).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("ip netns delete %s: %w: %s", netns, err, out))
		}
	}
	// A veth whose namespace end never moved (a start that failed half-way) stays on the machine's side. After the
	// namespace's deletion the kernel removes the pair on its own, soon but not at once: one gone by the time it is
	// deleted here is gone, not an error (Leftovers still reports one that stays).
	if _, err := os.Stat("/sys/class/net/" + netns); err == nil {
		if out, err := exec.Command("ip", "link", "delete", netns).CombinedOutput(); err != nil {
			if _, statErr := os.Stat("/sys/class/net/" + netns); statErr == nil {
				errs = append(errs, fmt.Errorf("ip link delete %s: %w: %s", netns, err, out))
			}
		}
	}
	for _, f := range []string{netns, netns + ".sock"} {
		if err := os.Remove(filepath.Join(ownerDir, f)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if names, _ := staleCandidates(); len(names) == 0 {
		_ = os.Remove(ownerDir)
		if err := guardRoute("del"); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// guardRoute adds or deletes a blackhole route for 100.66.0.0/16 on the machine while clusters run: a packet for a
// cluster that is not (or no longer) there is dropped here instead of following the default route off the machine.
// Each running cluster's /24 through its veth is more specific and wins.
func guardRoute(op string) error {
	out, err := exec.Command("ip", "route", op, "blackhole", "100.66.0.0/16").CombinedOutput()
	gone := op == "del" && strings.Contains(string(out), "No such process")
	if err != nil && !gone {
		return fmt.Errorf("ip route %s blackhole 100.66.0.0/16: %w: %s", op, err, out)
	}
	return nil
}

// namespacePids are the processes in network namespace netns.
func namespacePids(netns string) []int {
	if _, err := os.Stat("/run/netns/" + netns); err != nil {
		return nil
	}
	out, err := exec.Command("ip", "netns", "pids", netns).Output()
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// cgroupPids are the processes in the cluster's cgroups (pods under <netns>, daemons under <netns>.node).
func cgroupPids(netns string) []int {
	var pids []int
	for _, name := range []string{netns, netns + ".node"} {
		_ = filepath.WalkDir(filepath.Join(cgroupRoot, "pids", name), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.Name() != "cgroup.procs" {
				return nil
			}
			data, _ := os.ReadFile(path)
			for _, f := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(f); err == nil {
					pids = append(pids, pid)
				}
			}
			return nil
		})
	}
	return pids
}

// hierarchies are the cgroup v1 hierarchies mounted under /sys/fs/cgroup (cgroup2's "unified" is left alone: the
// kubelet runs in v1 mode here).
func hierarchies() ([]string, error) {
	entries, err := os.ReadDir(cgroupRoot)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		path := filepath.Join(cgroupRoot, e.Name())
		if fi, err := os.Lstat(path); err != nil || !fi.IsDir() || e.Name() == "unified" {
			continue // a symlink (cpu,cpuacct) names a hierarchy listed under its own name too
		}
		out = append(out, path)
	}
	return out, nil
}

// createCgroups makes the cluster's cgroup in every hierarchy; kubelet requires its cgroupRoot to exist. A new
// cpuset cgroup takes its parent's CPUs and memory nodes, or no process could join it.
func createCgroups(name string) error {
	hs, err := hierarchies()
	if err != nil {
		return err
	}
	for _, h := range hs {
		dir := filepath.Join(h, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if filepath.Base(h) == "cpuset" {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				data, err := os.ReadFile(filepath.Join(h, f))
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(dir, f), data, 0o644); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// removeCgroups removes the cluster's cgroups, deepest first, in every hierarchy.
func removeCgroups(netns string) error {
	hs, err := hierarchies()
	if err != nil {
		return err
	}
	var errs []error
	for _, h := range hs {
		for _, name := range []string{netns, netns + ".node"} {
			var dirs []string
			_ = filepath.WalkDir(filepath.Join(h, name), func(path string, d fs.DirEntry, err error) error {
				if err == nil && d.IsDir() {
					dirs = append(dirs, path)
				}
				return nil
			})
			for i := len(dirs) - 1; i >= 0; i-- {
				if err := os.Remove(dirs[i]); err != nil && !errors.Is(err, fs.ErrNotExist) {
					errs = append(errs, fmt.Errorf("remove cgroup %s: %w", dirs[i], err))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// Leftovers lists what of cluster index's is still on the machine: its network namespace, its veth, a route to its
// addresses (and the guard route once no cluster is left), its cgroups, processes in them, mounts of dir. Empty after
// Stop.
func Leftovers(index int, dir string) []string {
	netns := prefix + strconv.Itoa(index)
	var out []string
	if _, err := os.Stat("/run/netns/" + netns); err == nil {
		out = append(out, "network namespace "+netns)
	}
	if _, err := os.Stat("/sys/class/net/" + netns); err == nil {
		out = append(out, "veth "+netns)
	}
	if routes, _ := exec.Command("ip", "route", "show", "100.66."+strconv.Itoa(index)+".0/24").Output(); len(strings.TrimSpace(string(routes))) > 0 {
		out = append(out, "route "+strings.TrimSpace(string(routes)))
	}
	if names, _ := staleCandidates(); len(names) == 0 {
		if routes, _ := exec.Command("ip", "route", "show", "100.66.0.0/16").Output(); len(strings.TrimSpace(string(routes))) > 0 {
			out = append(out, "route "+strings.TrimSpace(string(routes))+" with no cluster left")
		}
	}
	hs, _ := hierarchies()
	for _, h := range hs {
		for _, name := range []string{netns, netns + ".node"} {
			if _, err := os.Stat(filepath.Join(h, name)); err == nil {
				out = append(out, "cgroup "+filepath.Join(h, name))
			}
		}
	}
	if pids := cgroupPids(netns); len(pids) > 0 {
		out = append(out, fmt.Sprintf("processes %v", pids))
	}
	if mounts, err := os.ReadFile("/proc/self/mountinfo"); err == nil && dir != "" {
		for _, line := range strings.Split(string(mounts), "\n") {
			if strings.Contains(line, dir) {
				out = append(out, "mount "+line)
			}
		}
	}
	for _, f := range []string{netns, netns + ".sock"} {
		if _, err := os.Lstat(filepath.Join(ownerDir, f)); err == nil {
			out = append(out, "owner record "+filepath.Join(ownerDir, f))
		}
	}
	return out
}
