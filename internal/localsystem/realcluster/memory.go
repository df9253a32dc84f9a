package realcluster

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Memory is what a cluster's processes hold, as the memory cgroups of its daemons and of its pods count it.
type Memory struct {
	// Usage is the cgroups' memory.usage_in_bytes: resident memory and the page cache charged to them.
	Usage uint64
	// RSS is the resident anonymous memory alone (total_rss).
	RSS uint64
}

// Add is m and o together.
func (m Memory) Add(o Memory) Memory { return Memory{Usage: m.Usage + o.Usage, RSS: m.RSS + o.RSS} }

// Memory reads what the cluster's processes hold now.
func (c *Cluster) Memory() (Memory, error) {
	var total Memory
	for _, name := range []string{c.name, c.name + ".node"} {
		dir := filepath.Join(cgroupRoot, "memory", name)
		usage, err := os.ReadFile(filepath.Join(dir, "memory.usage_in_bytes"))
		if err != nil {
			return Memory{}, err
		}
		u, err := strconv.ParseUint(strings.TrimSpace(string(usage)), 10, 64)
		if err != nil {
			return Memory{}, fmt.Errorf("%s: %w", dir, err)
		}
		rss, err := statValue(filepath.Join(dir, "memory.stat"), "total_rss")
		if err != nil {
			return Memory{}, err
		}
		total = total.Add(Memory{Usage: u, RSS: rss})
	}
	return total, nil
}

// statValue is the value of key in a cgroup v1 memory.stat file.
func statValue(path, key string) (uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if k, v, ok := strings.Cut(s.Text(), " "); ok && k == key {
			return strconv.ParseUint(v, 10, 64)
		}
	}
	if err := s.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("%s has no %s", path, key)
}
