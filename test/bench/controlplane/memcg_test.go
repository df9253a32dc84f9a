//go:build bench

package controlplane

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/process"
)

// cgroupV1Memory is where a cgroup v1 machine mounts its memory controller (this one does; a cgroup v2 machine
// would need memory.max and memory.peak instead).
const cgroupV1Memory = "/sys/fs/cgroup/memory"

// memoryCgroup is a cgroup v1 memory cgroup of the manager alone, under this test's own, limited as a container's
// memory limit limits the manager: the manager's automemlimit reads the limit from it, and the kernel's OOM killer
// enforces it.
type memoryCgroup struct{ dir string }

func newMemoryCgroup(t *testing.T, limit int64) *memoryCgroup {
	parent, err := ownMemoryCgroup()
	if err != nil {
		t.Fatalf("BENCH_MEMORY_LIMIT: %v", err)
	}
	dir := filepath.Join(cgroupV1Memory, parent, fmt.Sprintf("cluster-proxy-bench-%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatalf("BENCH_MEMORY_LIMIT: create a memory cgroup (it needs root and cgroup v1): %v", err)
	}
	cg := &memoryCgroup{dir: dir}
	if err := os.WriteFile(filepath.Join(dir, "memory.limit_in_bytes"), []byte(strconv.FormatInt(limit, 10)), 0o644); err != nil {
		cg.remove()
		t.Fatalf("BENCH_MEMORY_LIMIT: limit the memory cgroup %s: %v", dir, err)
	}
	return cg
}

// ownMemoryCgroup is this process's memory cgroup, relative to the hierarchy's root.
func ownMemoryCgroup() (string, error) {
	raw, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(raw), "\n") {
		// hierarchy-ID:controller-list:path
		if f := strings.SplitN(line, ":", 3); len(f) == 3 && strings.Contains(","+f[1]+",", ",memory,") {
			if _, err := os.Stat(filepath.Join(cgroupV1Memory, f[2], "memory.limit_in_bytes")); err != nil {
				return "", fmt.Errorf("no cgroup v1 memory controller at %s: %w", cgroupV1Memory, err)
			}
			return f[2], nil
		}
	}
	return "", fmt.Errorf("no cgroup v1 memory controller in /proc/self/cgroup")
}

// wrap starts c's program in the cgroup: a shell joins it, then becomes the program, so nothing the program
// allocates is charged elsewhere and the process is the program's own.
func (cg *memoryCgroup) wrap(c process.Command) process.Command {
	c.Args = append([]string{"-c", `echo $$ > "$CGROUP_PROCS" && exec "$0" "$@"`, c.Path}, c.Args...)
	c.Path = "/bin/sh"
	c.Env = append(os.Environ(), "CGROUP_PROCS="+filepath.Join(cg.dir, "cgroup.procs"))
	return c
}

// peakMiB is the most memory the cgroup held: the manager's anonymous memory and the page cache charged to it.
func (cg *memoryCgroup) peakMiB(t *testing.T) int {
	return int(cg.read(t, "memory.max_usage_in_bytes") >> 20)
}

// oomKills is how many processes of the cgroup the OOM killer ended.
func (cg *memoryCgroup) oomKills(t *testing.T) int {
	raw, err := os.ReadFile(filepath.Join(cg.dir, "memory.oom_control"))
	must(t, err)
	for _, line := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "oom_kill" {
			n, err := strconv.Atoi(f[1])
			must(t, err)
			return n
		}
	}
	return 0
}

func (cg *memoryCgroup) read(t *testing.T, file string) int64 {
	raw, err := os.ReadFile(filepath.Join(cg.dir, file))
	must(t, err)
	v, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
	must(t, err)
	return v
}

// remove deletes the cgroup once its process has ended (the kernel refuses while it has one).
func (cg *memoryCgroup) remove() { _ = os.Remove(cg.dir) }
