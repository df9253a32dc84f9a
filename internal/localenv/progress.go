package localenv

import (
	"fmt"
	"io"
	"time"
)

// progress prints timestamped lines, so a slow step is visible at a glance.
type progress struct {
	out   io.Writer
	start time.Time
}

func newProgress(out io.Writer) *progress {
	return &progress{out: out, start: time.Now()}
}

// step announces a phase: "[   1.2s] ==> starting ...".
func (p *progress) step(format string, args ...any) {
	p.line("==> "+format, args...)
}

// detail reports something within the current phase, indented under it.
func (p *progress) detail(format string, args ...any) {
	p.line("    "+format, args...)
}

// quote prints lines taken from elsewhere (a log tail), marked so they are not mistaken for localhub's own.
func (p *progress) quote(lines []string) {
	for _, l := range lines {
		fmt.Fprintf(p.out, "           | %s\n", l)
	}
}

// plain prints without a timestamp, for the summary that users copy from.
func (p *progress) plain(format string, args ...any) {
	fmt.Fprintf(p.out, format+"\n", args...)
}

func (p *progress) line(format string, args ...any) {
	fmt.Fprintf(p.out, "[%6.1fs] %s\n", time.Since(p.start).Seconds(), fmt.Sprintf(format, args...))
}
