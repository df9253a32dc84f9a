// Package benchmeasure holds the measurements the benchmarks share: this process's CPU time, the whole machine's busy
// CPU time (so a run can say how busy other processes kept the machine), and the median of repeated figures.
package benchmeasure

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// SelfCPU is this process's CPU time so far, user and system (getrusage).
func SelfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// MachineBusy is the CPU time all processes spent busy since boot: user, nice, system, irq, softirq and steal (guest
// time is already inside user and nice). /proc/stat counts in USER_HZ ticks, 10 ms. Zero when /proc/stat cannot be
// read.
func MachineBusy() time.Duration {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	fields := strings.Fields(line)
	if len(fields) < 2 {
		return 0
	}
	var ticks int64
	for i, f := range fields[1:] {
		if i == 3 || i == 4 || i > 7 { // idle, iowait; guest, guest_nice
			continue
		}
		v, _ := strconv.ParseInt(f, 10, 64)
		ticks += v
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}

// Median of v; the mean of the middle two for an even count, zero for none.
func Median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
