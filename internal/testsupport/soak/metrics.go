package soak

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// ProcessFigures reads a process's goroutines and resident memory from its /metrics (the Prometheus text format, as
// the Go and process collectors write go_goroutines and process_resident_memory_bytes).
func ProcessFigures(metrics []byte) (goroutines, rssBytes float64, err error) {
	found := map[string]float64{}
	s := bufio.NewScanner(bytes.NewReader(metrics))
	s.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 2 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		switch name := fields[0]; name {
		case "go_goroutines", "process_resident_memory_bytes":
			v, err := strconv.ParseFloat(fields[1], 64)
			if err != nil {
				return 0, 0, fmt.Errorf("%s: %w", name, err)
			}
			found[name] = v
		}
	}
	if err := s.Err(); err != nil {
		return 0, 0, err
	}
	for _, name := range []string{"go_goroutines", "process_resident_memory_bytes"} {
		if _, ok := found[name]; !ok {
			return 0, 0, fmt.Errorf("the metrics have no %s", name)
		}
	}
	return found["go_goroutines"], found["process_resident_memory_bytes"], nil
}
