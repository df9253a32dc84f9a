package asciicast

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	. "github.com/onsi/gomega"
)

func TestRoundTripKeepsHeaderAndEvents(t *testing.T) {
	g := NewWithT(t)
	header := Header{Width: 120, Height: 40, Timestamp: 1767225600, Command: "sh -c ls", Title: "cluster1: ns1/pod1/c1",
		Env: map[string]string{"TERM": "xterm-256color"},
		Kubernetes: &Kubernetes{Cluster: "cluster1", User: "alice", Groups: []string{"dev", "system:authenticated"},
			Namespace: "ns1", Pod: "pod1", Container: "c1", Command: []string{"sh", "-c", "ls"}, Subresource: "exec",
			Via: "user-server", SessionID: "S1", Replica: "proxy-0", TTY: true}}
	var buf bytes.Buffer
	w := NewWriter(&buf)
	g.Expect(w.WriteHeader(header)).To(Succeed())
	g.Expect(w.Resize(0, 100, 30)).To(Succeed())
	g.Expect(w.Output(1500*time.Microsecond, []byte("$ ls\r\n\x1b[1mbin\x1b[0m \"etc\" \\ \t"))).To(Succeed())
	g.Expect(w.Input(2*time.Second, []byte("exit\r"))).To(Succeed())
	g.Expect(w.Marker(3*time.Second+123456*time.Microsecond, "end")).To(Succeed())
	g.Expect(w.Finish()).To(Succeed())

	got, events, err := Decode(&buf)
	g.Expect(err).NotTo(HaveOccurred())
	header.Version = 2
	g.Expect(got).To(Equal(header))
	g.Expect(events).To(Equal([]Event{
		{Time: 0, Type: Resize, Data: "100x30"},
		{Time: 1500 * time.Microsecond, Type: Output, Data: "$ ls\r\n\x1b[1mbin\x1b[0m \"etc\" \\ \t"},
		{Time: 2 * time.Second, Type: Input, Data: "exit\r"},
		{Time: 3*time.Second + 123456*time.Microsecond, Type: Marker, Data: "end"},
	}))
	width, height, err := events[0].Size()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect([]int{width, height}).To(Equal([]int{100, 30}))
}

func TestHeaderLineIsWhatPlayersRead(t *testing.T) {
	g := NewWithT(t)
	var buf bytes.Buffer
	w := NewWriter(&buf)
	g.Expect(w.WriteHeader(Header{Width: 80, Height: 24, Timestamp: 10, Kubernetes: &Kubernetes{Cluster: "c", Pod: "p"}})).To(Succeed())
	g.Expect(w.Output(time.Second, []byte("hi"))).To(Succeed())
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	g.Expect(lines).To(HaveLen(2))
	var header map[string]any
	g.Expect(json.Unmarshal([]byte(lines[0]), &header)).To(Succeed())
	g.Expect(header).To(HaveKeyWithValue("version", 2.0))
	g.Expect(header).To(HaveKeyWithValue("width", 80.0))
	g.Expect(header).To(HaveKeyWithValue("timestamp", 10.0))
	g.Expect(header).To(HaveKeyWithValue("kubernetes", HaveKeyWithValue("cluster", "c")))
	g.Expect(lines[1]).To(Equal(`[1.000000,"o","hi"]`))
}

// writeSplit writes data as output in the pieces the cut positions make, and returns the recording.
func writeSplit(t *testing.T, data []byte, cuts ...int) (string, []Event) {
	t.Helper()
	var buf bytes.Buffer
	w := NewWriter(&buf)
	if err := w.WriteHeader(Header{Width: 80, Height: 24}); err != nil {
		t.Fatal(err)
	}
	from := 0
	for _, cut := range append(cuts, len(data)) {
		if err := w.Output(time.Duration(cut)*time.Millisecond, data[from:cut]); err != nil {
			t.Fatal(err)
		}
		from = cut
	}
	if err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	raw := buf.String()
	_, events, err := Decode(strings.NewReader(raw))
	if err != nil {
		t.Fatalf("decode %q: %v", raw, err)
	}
	return raw, events
}

func outputOf(events []Event) string {
	var b strings.Builder
	for _, e := range events {
		if e.Type == Output {
			b.WriteString(e.Data)
		}
	}
	return b.String()
}

func TestARuneSplitAcrossWritesIsKeptWhole(t *testing.T) {
	text := []byte("hé 世界 🎉!")
	for first := 0; first <= len(text); first++ {
		for second := first; second <= len(text); second++ {
			raw, events := writeSplit(t, text, first, second)
			if got := outputOf(events); got != string(text) {
				t.Fatalf("cut at %d and %d: output %q, want %q (recording %q)", first, second, got, text, raw)
			}
			for _, line := range strings.Split(strings.TrimSpace(raw), "\n") {
				if !json.Valid([]byte(line)) || !utf8.ValidString(line) {
					t.Fatalf("cut at %d and %d: line %q is not valid UTF-8 JSON", first, second, line)
				}
			}
		}
	}
}

func TestInvalidBytesBecomeOneReplacementPerMaximalSubpart(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want string
	}{
		{"a byte that starts nothing", "a\xffb", "a\ufffdb"},
		{"a continuation byte alone", "\x80x", "\ufffdx"},
		{"a truncated three-byte rune", "a\xe2\x82b", "a\ufffdb"},
		{"a truncated four-byte rune before ASCII", "\xf0\x9f\x98x", "\ufffdx"},
		{"an overlong encoding", "\xc0\xaf", "\ufffd\ufffd"},
		{"a surrogate", "\xed\xa0\x80", "\ufffd\ufffd\ufffd"},
		{"above U+10FFFF", "\xf4\x90\x80\x80", "\ufffd\ufffd\ufffd\ufffd"},
		{"a rune the recording ends in", "ok\xe4\xb8", "ok\ufffd"},
		{"control characters", "\x00\x07\x1b[0m\x7f", "\x00\x07\x1b[0m\x7f"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			raw, events := writeSplit(t, []byte(tc.in))
			g.Expect(outputOf(events)).To(Equal(tc.want), "recording %q", raw)
			g.Expect(utf8.ValidString(raw)).To(BeTrue())
		})
	}
}

func TestBinaryDataMakesValidLines(t *testing.T) {
	g := NewWithT(t)
	data := make([]byte, 0, 4096)
	for i := range 4096 {
		data = append(data, byte(i*7+i/256))
	}
	raw, events := writeSplit(t, data, 1, 2, 3, 100, 1000, 1001, 3000)
	for _, line := range strings.Split(strings.TrimSpace(raw), "\n") {
		g.Expect(json.Valid([]byte(line))).To(BeTrue(), "line %q", line)
		g.Expect(utf8.ValidString(line)).To(BeTrue(), "line %q", line)
	}
	g.Expect(strings.Count(outputOf(events), "\ufffd")).To(BeNumerically(">", 0))
	// The ASCII bytes come through as they were.
	var ascii []byte
	for _, b := range data {
		if b < utf8.RuneSelf {
			ascii = append(ascii, b)
		}
	}
	var gotASCII []byte
	for _, r := range outputOf(events) {
		if r < utf8.RuneSelf {
			gotASCII = append(gotASCII, byte(r))
		}
	}
	g.Expect(gotASCII).To(Equal(ascii))
}

func TestResizeEvents(t *testing.T) {
	g := NewWithT(t)
	var buf bytes.Buffer
	w := NewWriter(&buf)
	g.Expect(w.WriteHeader(Header{Width: 80, Height: 24})).To(Succeed())
	g.Expect(w.Resize(time.Second, 120, 40)).To(Succeed())
	g.Expect(buf.String()).To(HaveSuffix("\n[1.000000,\"r\",\"120x40\"]\n"))
	_, events, err := Decode(&buf)
	g.Expect(err).NotTo(HaveOccurred())
	width, height, err := events[0].Size()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect([]int{width, height}).To(Equal([]int{120, 40}))
	_, _, err = Event{Type: Resize, Data: "120"}.Size()
	g.Expect(err).To(HaveOccurred())
}

func TestReaderRefusesWhatIsNotAsciicastV2(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"empty", "", "no header"},
		{"version 1", `{"version":1,"width":80,"height":24}`, "version 1 is not supported"},
		{"not JSON", "hello\n", "asciicast header"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := Decode(strings.NewReader(tc.in))
			NewWithT(t).Expect(err).To(MatchError(ContainSubstring(tc.want)))
		})
	}
	_, _, err := Decode(strings.NewReader("{\"version\":2,\"width\":80,\"height\":24}\n[1.0,\"o\"]\n"))
	NewWithT(t).Expect(err).To(MatchError(ContainSubstring("line 2")))
	NewWithT(t).Expect(errors.Is(err, io.ErrUnexpectedEOF)).To(BeFalse(), "a whole line that is no event is not a recording cut short")
}

func TestARecordingCutShortPlaysToWhereItEnds(t *testing.T) {
	g := NewWithT(t)
	recording := "{\"version\":2,\"width\":80,\"height\":24}\n[0.1,\"o\",\"seen\"]\n[0.2,\"o\",\"cut sh"
	var out bytes.Buffer
	err := Play(&out, strings.NewReader(recording), PlayOptions{})
	g.Expect(err).To(MatchError(io.ErrUnexpectedEOF))
	g.Expect(out.String()).To(Equal("seen"))
}

func TestPlayPacesOutputAsAsked(t *testing.T) {
	recording := strings.Join([]string{
		`{"version":2,"width":80,"height":24}`,
		`[0.5,"o","a"]`,
		`[0.6,"r","100x30"]`,
		`[1.5,"i","typed"]`,
		`[2.0,"o","b"]`,
		`[12.0,"o","c"]`,
		`[12.25,"m","end"]`,
	}, "\n") + "\n"
	ms := time.Millisecond
	for _, tc := range []struct {
		name   string
		opts   PlayOptions
		sleeps []time.Duration
	}{
		{"real time", PlayOptions{Speed: 1}, []time.Duration{500 * ms, 1500 * ms, 10000 * ms}},
		{"twice as fast", PlayOptions{Speed: 2}, []time.Duration{250 * ms, 750 * ms, 5000 * ms}},
		{"pauses capped", PlayOptions{Speed: 1, MaxIdle: 800 * ms}, []time.Duration{500 * ms, 100*ms + 800*ms + 500*ms, 800 * ms}},
		{"all at once", PlayOptions{Speed: 0, MaxIdle: time.Second}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			var slept []time.Duration
			tc.opts.Sleep = func(d time.Duration) { slept = append(slept, d) }
			var out bytes.Buffer
			g.Expect(Play(&out, strings.NewReader(recording), tc.opts)).To(Succeed())
			g.Expect(out.String()).To(Equal("abc"))
			g.Expect(slept).To(Equal(tc.sleeps))
		})
	}
	err := Play(&bytes.Buffer{}, strings.NewReader(recording), PlayOptions{Speed: -1})
	NewWithT(t).Expect(err).To(MatchError(ContainSubstring("speed")))
}
