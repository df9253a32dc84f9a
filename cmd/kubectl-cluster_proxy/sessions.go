package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/pkg/asciicast"
)

// sessionsCommand reads the recordings of exec and attach sessions as the proxy-server stores them:
// <dir>/<cluster>/<YYYY-MM-DD>/<session ID>.cast, asciicast v2.
type sessionsCommand struct {
	globals
	dir, cluster, user string
	speed              float64
	maxIdle            time.Duration
	// sleep waits between outputs of play; nil waits on a timer.
	sleep func(time.Duration)
}

func (c *sessionsCommand) registerList(fs *flag.FlagSet) {
	fs.StringVar(&c.dir, "dir", "", "the directory of the recordings (required)")
	fs.StringVar(&c.cluster, "cluster", "", "only the sessions of this cluster")
	fs.StringVar(&c.user, "user", "", "only the sessions of this user")
}

func (c *sessionsCommand) registerPlay(fs *flag.FlagSet) {
	fs.StringVar(&c.dir, "dir", "", "the directory of the recordings, to find a session by its ID")
	fs.Float64Var(&c.speed, "speed", 1, "2 plays twice as fast, 0 writes everything at once")
	fs.DurationVar(&c.maxIdle, "max-idle", 0, "cap every pause of the recording at this, e.g. 2s; 0 keeps them")
}

// runSessions is `sessions list` and `sessions play`; args follow "sessions".
func runSessions(ctx context.Context, g globals, args []string, stdout, stderr io.Writer) error {
	c := sessionsCommand{globals: g}
	if len(args) == 0 {
		return fmt.Errorf("%w: sessions takes list or play", errUsage)
	}
	switch sub, rest := args[0], args[1:]; sub {
	case "list":
		if err := commandLine("sessions list", stderr, &c.globals, c.registerList, rest, "no arguments"); err != nil {
			return err
		}
		return c.list(stdout, stderr)
	case "play":
		var target string
		if err := commandLine("sessions play", stderr, &c.globals, c.registerPlay, rest, "a recording file or a session ID", &target); err != nil {
			return err
		}
		return c.play(ctx, target, stdout, stderr)
	default:
		return fmt.Errorf("%w: unknown sessions command %q: want list or play", errUsage, sub)
	}
}

// sessionRow is one line of the list.
type sessionRow struct {
	id, cluster, user, namespace, pod, container, command string
	started                                               time.Time
	duration                                              time.Duration
}

func (c *sessionsCommand) list(stdout, stderr io.Writer) error {
	if c.dir == "" {
		return fmt.Errorf("%w: sessions list needs --dir, the directory of the recordings", errUsage)
	}
	clusters, err := os.ReadDir(c.dir)
	if err != nil {
		return fmt.Errorf("read the recordings: %w", err)
	}
	var rows []sessionRow
	for _, cluster := range clusters {
		if !cluster.IsDir() || (c.cluster != "" && cluster.Name() != c.cluster) {
			continue
		}
		files, err := recordingFiles(filepath.Join(c.dir, cluster.Name()))
		if err != nil {
			return err
		}
		for _, file := range files {
			row, err := readSessionRow(file, cluster.Name())
			if err != nil {
				_, _ = fmt.Fprintf(stderr, "warning: %s: %v\n", file, err)
				continue
			}
			if (c.cluster == "" || row.cluster == c.cluster) && (c.user == "" || row.user == c.user) {
				rows = append(rows, row)
			}
		}
	}
	slices.SortFunc(rows, func(a, b sessionRow) int {
		if c := a.started.Compare(b.started); c != 0 {
			return c
		}
		return strings.Compare(a.id, b.id)
	})
	printSessions(stdout, rows)
	return nil
}

// recordingFiles are the <YYYY-MM-DD>/<session ID>.cast files under a cluster's directory.
func recordingFiles(clusterDir string) ([]string, error) {
	days, err := os.ReadDir(clusterDir)
	if err != nil {
		return nil, fmt.Errorf("read the recordings: %w", err)
	}
	var files []string
	for _, day := range days {
		if !day.IsDir() {
			continue
		}
		entries, err := os.ReadDir(filepath.Join(clusterDir, day.Name()))
		if err != nil {
			return nil, fmt.Errorf("read the recordings: %w", err)
		}
		for _, e := range entries {
			if e.Type().IsRegular() && strings.HasSuffix(e.Name(), ".cast") {
				files = append(files, filepath.Join(clusterDir, day.Name(), e.Name()))
			}
		}
	}
	return files, nil
}

// readSessionRow reads a recording's header, and its duration from its last event.
func readSessionRow(file, cluster string) (sessionRow, error) {
	f, err := os.Open(file)
	if err != nil {
		return sessionRow{}, err
	}
	defer func() { _ = f.Close() }()
	rd, err := asciicast.NewReader(f)
	if err != nil {
		return sessionRow{}, err
	}
	h := rd.Header
	row := sessionRow{id: strings.TrimSuffix(filepath.Base(file), ".cast"), cluster: cluster, command: h.Command,
		started: h.Started()}
	if k := h.Kubernetes; k != nil {
		row.cluster, row.user, row.namespace, row.pod, row.container = k.Cluster, k.User, k.Namespace, k.Pod, k.Container
		row.command = strings.Join(k.Command, " ")
		if k.SessionID != "" {
			row.id = k.SessionID
		}
	}
	info, err := f.Stat()
	if err != nil {
		return sessionRow{}, err
	}
	if row.duration, err = lastEventTime(f, info.Size()); err != nil {
		return sessionRow{}, err
	}
	return row, nil
}

// lastEventTime reads the time of a recording's last whole event from its end, so that a large recording is not
// read through. A last line cut short (the proxy-server died while writing it) is passed over.
func lastEventTime(f io.ReaderAt, size int64) (time.Duration, error) {
	for window := int64(64 << 10); ; window *= 2 {
		start := max(size-window, 0)
		buf := make([]byte, size-start)
		if _, err := f.ReadAt(buf, start); err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}
		lines := bytes.Split(buf, []byte("\n"))
		if start > 0 {
			lines = lines[1:] // the first may begin mid-line
		}
		for i := len(lines) - 1; i >= 0; i-- {
			line := bytes.TrimSpace(lines[i])
			if len(line) == 0 || line[0] != '[' {
				continue
			}
			var e asciicast.Event
			if json.Unmarshal(line, &e) == nil {
				return e.Time, nil
			}
		}
		if start == 0 {
			return 0, nil // no event
		}
	}
}

func printSessions(out io.Writer, rows []sessionRow) {
	w := tabwriter.NewWriter(out, 4, 8, 3, ' ', 0)
	_, _ = fmt.Fprintln(w, "SESSION\tCLUSTER\tUSER\tNAMESPACE\tPOD\tCONTAINER\tCOMMAND\tSTARTED\tDURATION")
	for _, r := range rows {
		_, _ = fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.id, orNone(r.cluster), orNone(r.user),
			orNone(r.namespace), orNone(r.pod), orNone(r.container), orNone(r.command),
			r.started.UTC().Format(time.RFC3339), formatDuration(r.duration))
	}
	_ = w.Flush()
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

// formatDuration keeps tenths of a second under a minute, whole seconds above.
func formatDuration(d time.Duration) string {
	if d < time.Minute {
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

func (c *sessionsCommand) play(ctx context.Context, target string, stdout, stderr io.Writer) error {
	if c.speed < 0 {
		return fmt.Errorf("%w: --speed must be 0 or more", errUsage)
	}
	file, err := c.recordingFile(target)
	if err != nil {
		return err
	}
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	sleep := c.sleep
	if sleep == nil {
		sleep = func(d time.Duration) {
			t := time.NewTimer(d)
			defer t.Stop()
			select {
			case <-t.C:
			case <-ctx.Done():
			}
		}
	}
	err = asciicast.Play(contextWriter{ctx, stdout}, f, asciicast.PlayOptions{Speed: c.speed, MaxIdle: c.maxIdle, Sleep: sleep})
	if errors.Is(err, io.ErrUnexpectedEOF) {
		// The proxy-server stopped while it wrote the recording: all there was has been played.
		_, _ = fmt.Fprintf(stderr, "warning: %s: %v\n", file, err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("play %s: %w", file, err)
	}
	return nil
}

// recordingFile is target if it is a file, else the recording of the session target names under --dir.
func (c *sessionsCommand) recordingFile(target string) (string, error) {
	if info, err := os.Stat(target); err == nil && info.Mode().IsRegular() {
		return target, nil
	}
	if strings.ContainsAny(target, `/\*?[`) || target == "." || target == ".." {
		return "", fmt.Errorf("no recording file %s", target)
	}
	if c.dir == "" {
		return "", fmt.Errorf("%w: %q is no file; to find a session by its ID, name the directory of the recordings with --dir", errUsage, target)
	}
	files, err := filepath.Glob(filepath.Join(c.dir, "*", "*", target+".cast"))
	if err != nil {
		return "", err
	}
	switch len(files) {
	case 0:
		return "", fmt.Errorf("no recording of session %s under %s", target, c.dir)
	case 1:
		return files[0], nil
	default:
		return "", fmt.Errorf("session %s has more than one recording: %s", target, strings.Join(files, ", "))
	}
}

// contextWriter stops the play when ctx ends (Ctrl-C).
type contextWriter struct {
	ctx context.Context
	w   io.Writer
}

func (w contextWriter) Write(p []byte) (int, error) {
	if err := w.ctx.Err(); err != nil {
		return 0, err
	}
	return w.w.Write(p)
}
