package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/pkg/asciicast"
)

// recorded is a session to write under a recordings directory as the proxy-server does.
type recorded struct {
	k       asciicast.Kubernetes
	started time.Time
	events  []asciicast.Event
	// tail is written after the events: a line the proxy-server did not finish.
	tail string
}

func writeRecordings(t *testing.T, dir string, sessions ...recorded) {
	t.Helper()
	for _, s := range sessions {
		file := filepath.Join(dir, s.k.Cluster, s.started.UTC().Format("2006-01-02"), s.k.SessionID+".cast")
		mustDo(t, os.MkdirAll(filepath.Dir(file), 0o700))
		f, err := os.Create(file)
		mustDo(t, err)
		w := asciicast.NewWriter(f)
		k := s.k
		mustDo(t, w.WriteHeader(asciicast.Header{Width: 80, Height: 24, Timestamp: s.started.Unix(), Kubernetes: &k}))
		for _, e := range s.events {
			switch e.Type {
			case asciicast.Output:
				mustDo(t, w.Output(e.Time, []byte(e.Data)))
			case asciicast.Input:
				mustDo(t, w.Input(e.Time, []byte(e.Data)))
			case asciicast.Marker:
				mustDo(t, w.Marker(e.Time, e.Data))
			}
		}
		_, err = f.WriteString(s.tail)
		mustDo(t, err)
		mustDo(t, f.Close())
	}
}

func sessionsFixture(t *testing.T) string {
	dir := t.TempDir()
	day := time.Date(2026, 3, 4, 10, 0, 0, 0, time.UTC)
	big := strings.Repeat("x", 100<<10) // more than the first look at a recording's end
	writeRecordings(t, dir,
		recorded{k: asciicast.Kubernetes{Cluster: "cluster1", User: "alice", Namespace: "ns1", Pod: "web-0", Container: "app",
			Command: []string{"sh", "-c", "ls /"}, Subresource: "exec", SessionID: "S2"}, started: day.Add(time.Hour),
			events: []asciicast.Event{{Time: time.Second, Type: asciicast.Output, Data: "bin etc\r\n"},
				{Time: 65*time.Second + 200*time.Millisecond, Type: asciicast.Marker, Data: "end"}}},
		recorded{k: asciicast.Kubernetes{Cluster: "cluster1", User: "bob", Namespace: "ns1", Pod: "web-1",
			Subresource: "attach", SessionID: "S1"}, started: day,
			events: []asciicast.Event{{Time: 500 * time.Millisecond, Type: asciicast.Output, Data: "hello\r\n"},
				{Time: 2500 * time.Millisecond, Type: asciicast.Output, Data: big}},
			tail: `[9.0,"o","cut sho`},
		recorded{k: asciicast.Kubernetes{Cluster: "cluster2", User: "alice", Namespace: "kube-system", Pod: "dns",
			Container: "coredns", Command: []string{"cat", "/etc/resolv.conf"}, Subresource: "exec", SessionID: "S3"},
			started: day.AddDate(0, 0, 1)},
	)
	return dir
}

func TestSessionsListShowsEveryRecording(t *testing.T) {
	dir := sessionsFixture(t)
	mustDo(t, os.WriteFile(filepath.Join(dir, "cluster1", "2026-03-04", "notes.txt"), []byte("not a recording"), 0o600))
	mustDo(t, os.WriteFile(filepath.Join(dir, "cluster2", "2026-03-05", "broken.cast"), []byte("garbage\n"), 0o600))
	for _, tc := range []struct {
		name string
		args []string
		want [][]string
	}{
		{"all", nil, [][]string{
			{"S1", "cluster1", "bob", "ns1", "web-1", "<none>", "<none>", "2026-03-04T10:00:00Z", "2.5s"},
			{"S2", "cluster1", "alice", "ns1", "web-0", "app", "sh", "-c", "ls", "/", "2026-03-04T11:00:00Z", "1m5s"},
			{"S3", "cluster2", "alice", "kube-system", "dns", "coredns", "cat", "/etc/resolv.conf", "2026-03-05T10:00:00Z", "0s"},
		}},
		{"a cluster", []string{"--cluster", "cluster2"}, [][]string{
			{"S3", "cluster2", "alice", "kube-system", "dns", "coredns", "cat", "/etc/resolv.conf", "2026-03-05T10:00:00Z", "0s"},
		}},
		{"a user", []string{"--user=alice", "--cluster", "cluster1"}, [][]string{
			{"S2", "cluster1", "alice", "ns1", "web-0", "app", "sh", "-c", "ls", "/", "2026-03-04T11:00:00Z", "1m5s"},
		}},
		{"nobody", []string{"--user", "carol"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			code, out, errOut := plugin(append([]string{"sessions", "list", "--dir", dir}, tc.args...)...)
			g.Expect(code).To(Equal(0), errOut)
			lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
			g.Expect(strings.Fields(lines[0])).To(Equal([]string{"SESSION", "CLUSTER", "USER", "NAMESPACE", "POD", "CONTAINER",
				"COMMAND", "STARTED", "DURATION"}))
			var rows [][]string
			for _, line := range lines[1:] {
				rows = append(rows, strings.Fields(line))
			}
			g.Expect(rows).To(Equal(tc.want))
			if tc.name == "all" {
				g.Expect(errOut).To(ContainSubstring("broken.cast"), "a file that is no recording is named, and passed over")
			}
		})
	}
}

func TestSessionsPlayWritesTheOutput(t *testing.T) {
	dir := sessionsFixture(t)
	big := strings.Repeat("x", 100<<10)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"by session ID", []string{"S2", "--dir", dir, "--speed", "0"}, "bin etc\r\n"},
		{"by file", []string{"--speed=0", filepath.Join(dir, "cluster1", "2026-03-04", "S1.cast")}, "hello\r\n" + big},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := plugin(append([]string{"sessions", "play"}, tc.args...)...)
			NewWithT(t).Expect(code).To(Equal(0), errOut)
			NewWithT(t).Expect(out == tc.want).To(BeTrue(), "output %.60q…", out)
		})
	}
}

func TestSessionsPlayPacesAsAsked(t *testing.T) {
	g := NewWithT(t)
	dir := sessionsFixture(t)
	var slept []time.Duration
	c := sessionsCommand{dir: dir, speed: 2, maxIdle: time.Second, sleep: func(d time.Duration) { slept = append(slept, d) }}
	var out strings.Builder
	var warnings strings.Builder
	g.Expect(c.play(context.Background(), "S1", &out, &warnings)).To(Succeed())
	g.Expect(warnings.String()).To(ContainSubstring("the recording ends mid-event"))
	g.Expect(slept).To(Equal([]time.Duration{250 * time.Millisecond, 500 * time.Millisecond}))
	g.Expect(out.String()).To(HavePrefix("hello\r\n"))
}

func TestSessionsNameWhatIsWrong(t *testing.T) {
	dir := sessionsFixture(t)
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no subcommand", []string{"sessions"}, 2, "sessions takes list or play"},
		{"an unknown subcommand", []string{"sessions", "show"}, 2, `unknown sessions command "show"`},
		{"list without a directory", []string{"sessions", "list"}, 2, "needs --dir"},
		{"a directory that is not there", []string{"sessions", "list", "--dir", filepath.Join(dir, "nope")}, 1, "read the recordings"},
		{"play without a session", []string{"sessions", "play", "--dir", dir}, 2, "takes a recording file or a session ID"},
		{"a session ID without a directory", []string{"sessions", "play", "S1"}, 2, "--dir"},
		{"an unknown session", []string{"sessions", "play", "S9", "--dir", dir}, 1, "no recording of session S9"},
		{"a path that is no file", []string{"sessions", "play", "../S1", "--dir", dir}, 1, "no recording file"},
		{"a negative speed", []string{"sessions", "play", "S1", "--dir", dir, "--speed", "-1"}, 2, "--speed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errOut := plugin(tc.args...)
			NewWithT(t).Expect(code).To(Equal(tc.code), errOut)
			NewWithT(t).Expect(errOut).To(ContainSubstring(tc.want))
		})
	}
}
