package audit

import (
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apiserver/plugin/pkg/audit/buffered"
)

// Options kube-apiserver would refuse fail New, naming the flag.
func TestBadOptionsFailNewNamingTheFlag(t *testing.T) {
	dir := t.TempDir()
	aFile := filepath.Join(dir, "a-file")
	if err := os.WriteFile(aFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(dir, "audit.log")
	cases := map[string]struct {
		o    Options
		flag string
	}{
		"log path under a file":        {Options{LogPath: filepath.Join(aFile, "audit.log")}, "--audit-log-path"},
		"log path in a file's place":   {Options{LogPath: filepath.Join(aFile, "dir", "audit.log")}, "--audit-log-path"},
		"log path that is a directory": {Options{LogPath: dir}, "--audit-log-path"},
		"negative max age":             {Options{LogPath: log, LogMaxAge: -1}, "--audit-log-maxage"},
		"negative max backups":         {Options{LogPath: log, LogMaxBackups: -1}, "--audit-log-maxbackup"},
		"negative max size":            {Options{LogPath: log, LogMaxSize: -1}, "--audit-log-maxsize"},
		"unknown log mode":             {Options{LogPath: log, LogMode: "async"}, "--audit-log-mode"},
		"empty log buffer":             {Options{LogPath: log, LogMode: ModeBatch, LogBatch: &buffered.BatchConfig{MaxBatchSize: 1}}, "--audit-log-batch-buffer-size"},
		"unknown webhook mode":         {Options{WebhookKubeconfig: aFile, WebhookMode: "Batch"}, "--audit-webhook-mode"},
		"no wait between batches":      {Options{WebhookKubeconfig: aFile, WebhookBatch: &buffered.BatchConfig{BufferSize: 10, MaxBatchSize: 10}}, "--audit-webhook-batch-max-wait"},
		"missing webhook kubeconfig":   {Options{WebhookKubeconfig: filepath.Join(dir, "nope")}, "--audit-webhook-config-file"},
		"empty webhook kubeconfig":     {Options{WebhookKubeconfig: aFile}, "--audit-webhook-config-file"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := New(c.o)
			NewWithT(t).Expect(err).To(MatchError(HavePrefix(c.flag + ": ")))
		})
	}
}

// A log directory the proxy-server may not write fails New, naming the flag. Root writes anywhere, so as root the
// check runs again in a child of this test binary as the user nobody, as the proxy-server runs: not as root.
func TestAReadOnlyLogDirectoryFailsNew(t *testing.T) {
	if dir := os.Getenv(readOnlyDirEnv); dir != "" {
		_, err := New(Options{LogPath: filepath.Join(dir, "audit.log")})
		NewWithT(t).Expect(err).To(MatchError(And(HavePrefix("--audit-log-path: "), ContainSubstring("permission denied"))))
		return
	}
	parent, err := os.MkdirTemp("", "audit-ro-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(parent) })
	dir := filepath.Join(parent, "ro")
	if err := os.Mkdir(dir, 0o555); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(parent, 0o755); err != nil { // the child's user reaches dir, and may not write in it
		t.Fatal(err)
	}
	if os.Geteuid() != 0 {
		t.Setenv(readOnlyDirEnv, dir)
		TestAReadOnlyLogDirectoryFailsNew(t)
		return
	}
	// The test binary's own folder is root's alone: the child runs a copy beside dir.
	binary := filepath.Join(parent, "audit.test")
	raw, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(binary, raw, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary, "-test.run=^TestAReadOnlyLogDirectoryFailsNew$", "-test.count=1")
	cmd.Env = append(os.Environ(), readOnlyDirEnv+"="+dir)
	cmd.Dir = parent
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("as the user nobody: %v\n%s", err, out)
	}
}

// readOnlyDirEnv hands the child of TestAReadOnlyLogDirectoryFailsNew the directory it may not write.
const readOnlyDirEnv = "AUDIT_TEST_READ_ONLY_DIR"

// The log file is created as kube-apiserver creates it: with its directory, readable by the owner alone.
func TestTheLogFileIsCreatedPrivate(t *testing.T) {
	g := NewWithT(t)
	path := filepath.Join(t.TempDir(), "nested", "dir", "audit.log")
	startAuditor(t, Options{LogPath: path, LogMaxSize: 1})
	fi, err := os.Stat(path)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(fi.Mode().Perm()).To(Equal(os.FileMode(0o600)))
	di, err := os.Stat(filepath.Dir(path))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(di.Mode().Perm()).To(Equal(os.FileMode(0o700)))
}

// A log that cannot be written (its volume is full) is counted and reported down with the write's error, until a
// write succeeds again.
func TestLogWriteFailuresReportTheSinkDownUntilAWriteSucceeds(t *testing.T) {
	g := NewWithT(t)
	w := &failingWriter{}
	a := startAuditorWith(t, Options{LogMode: ModeBlocking}, testHooks{logWriter: w})
	sent, failed := counted(sinkLog, resultSent), counted(sinkLog, resultError)

	a.Begin(getPod("a")).Complete(200, 0, time.Time{})
	g.Expect(counted(sinkLog, resultSent)).To(Equal(sent + 1))
	g.Expect(healthOf(a, sinkLog).Up).To(BeTrue())

	w.setFail(true)
	e := a.Begin(getPod("b"))
	g.Expect(e.Admit()).To(Succeed(), "blocking, not blocking-strict: requests go on")
	e.Complete(200, 0, time.Time{})
	g.Expect(counted(sinkLog, resultError)).To(Equal(failed + 1))
	g.Expect(upGauge(sinkLog)).To(BeZero())
	h := healthOf(a, sinkLog)
	g.Expect(h.Up).To(BeFalse())
	g.Expect(h.Mode).To(Equal(ModeBlocking))
	g.Expect(h.LastError).To(ContainSubstring("no space left on device"))

	w.setFail(false)
	a.Begin(getPod("c")).Complete(200, 0, time.Time{})
	g.Expect(counted(sinkLog, resultSent)).To(Equal(sent + 2))
	g.Expect(upGauge(sinkLog)).To(Equal(1.0))
	h = healthOf(a, sinkLog)
	g.Expect(h.Up).To(BeTrue())
	g.Expect(h.LastError).To(BeEmpty())
	g.Expect(decodeEvents(g, w.bytes())).To(HaveLen(2))
}

// In batch mode the log is written in the background: its failures are counted and reported all the same.
func TestBatchedLogWriteFailuresAreCounted(t *testing.T) {
	g := NewWithT(t)
	w := &failingWriter{fail: true}
	a := startAuditorWith(t, Options{LogMode: ModeBatch}, testHooks{logWriter: w})
	failed, sent := counted(sinkLog, resultError), counted(sinkLog, resultSent)

	a.Begin(getPod("a")).Complete(200, 0, time.Time{})
	g.Eventually(func() float64 { return counted(sinkLog, resultError) }).Should(Equal(failed + 1))
	g.Expect(healthOf(a, sinkLog).Up).To(BeFalse())
	g.Expect(healthOf(a, sinkLog).LastError).To(ContainSubstring("no space left on device"))

	w.setFail(false)
	a.Begin(getPod("b")).Complete(200, 0, time.Time{})
	g.Eventually(func() bool { return healthOf(a, sinkLog).Up }).Should(BeTrue())
	g.Expect(counted(sinkLog, resultSent)).To(Equal(sent + 1))
}

// A batch sink holds at most its buffer's size of events: one more is dropped, counted, and the sink reported down
// until it writes again.
func TestAFullBufferDropsEventsAndCountsThem(t *testing.T) {
	g := NewWithT(t)
	w := newGatedWriter()
	a := startAuditorWith(t, Options{LogMode: ModeBatch, LogBatch: &buffered.BatchConfig{BufferSize: 2, MaxBatchSize: 1}},
		testHooks{logWriter: w})
	t.Cleanup(w.open) // before Shutdown
	dropped, sent := counted(sinkLog, resultDropped), counted(sinkLog, resultSent)

	first := a.Begin(getPod("first"))
	first.Complete(200, 0, time.Time{})
	g.Eventually(w.entered).Should(BeClosed(), "the first event is being written, and held there")
	second := a.Begin(getPod("second"))
	second.Complete(200, 0, time.Time{})
	third := a.Begin(getPod("third"))
	third.Complete(200, 0, time.Time{})

	g.Expect(counted(sinkLog, resultDropped)).To(Equal(dropped + 1))
	h := healthOf(a, sinkLog)
	g.Expect(h.Up).To(BeFalse())
	g.Expect(h.LastError).To(ContainSubstring("buffer of 2 events is full"))

	w.open()
	g.Eventually(func() float64 { return counted(sinkLog, resultSent) }).Should(Equal(sent + 2))
	g.Eventually(func() bool { return healthOf(a, sinkLog).Up }).Should(BeTrue())
	events := decodeEvents(g, w.bytes())
	g.Expect(byID(events, first.ID())).To(HaveLen(1))
	g.Expect(byID(events, second.ID())).To(HaveLen(1))
	g.Expect(byID(events, third.ID())).To(BeEmpty())
}

// Shutdown writes what the buffers hold before it returns; later events are dropped, counted.
func TestShutdownFlushesTheBuffersAndDropsLaterEvents(t *testing.T) {
	g := NewWithT(t)
	w := newGatedWriter()
	a, err := newAuditor(Options{LogMode: ModeBatch}, testHooks{logWriter: w})
	g.Expect(err).NotTo(HaveOccurred())
	a.Run(t.Context())
	t.Cleanup(a.Shutdown)
	t.Cleanup(w.open)
	dropped := counted(sinkLog, resultDropped)

	var ids []string
	for _, name := range []string{"a", "b", "c"} {
		e := a.Begin(getPod(name))
		e.Complete(200, 0, time.Time{})
		ids = append(ids, e.ID())
	}
	g.Eventually(w.entered).Should(BeClosed(), "the first event is being written, and held there")
	w.open()
	a.Shutdown()
	events := decodeEvents(g, w.bytes())
	for _, id := range ids {
		g.Expect(byID(events, id)).To(HaveLen(1))
	}

	late := a.Begin(getPod("late"))
	late.Complete(200, 0, time.Time{})
	g.Expect(counted(sinkLog, resultDropped)).To(Equal(dropped + 1))
	g.Expect(byID(decodeEvents(g, w.bytes()), late.ID())).To(BeEmpty())
	a.Shutdown() // twice is fine
}

// The log rotates as kube-apiserver's does (lumberjack): at LogMaxSize MiB, keeping LogMaxBackups rotated files.
func TestTheLogRotatesAtMaxSizeAndKeepsMaxBackups(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	policy := writeFile(t, "policy.yaml", "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n- level: Request\n")
	a := startAuditor(t, Options{LogPath: path, LogMaxSize: 1, LogMaxBackups: 2, PolicyFile: policy})

	// 60 KiB events: about 17 a MiB; 120 of them rotate the file 6 or 7 times.
	body := []byte(`{"data":"` + strings.Repeat("x", 60<<10) + `"}`)
	var ids []string
	for range 120 {
		e := a.Begin(Request{User: alice, Method: "POST", EscapedPath: "/api/v1/namespaces/a/configmaps"})
		e.RequestBody(body, "application/json")
		e.Complete(201, 0, time.Time{})
		ids = append(ids, e.ID())
	}

	backups := func() []string {
		m, _ := filepath.Glob(filepath.Join(dir, "audit-*.log"))
		return m
	}
	// Lumberjack removes the old backups in the background.
	g.Eventually(backups).Should(HaveLen(2))
	var kept []string
	for _, f := range append(backups(), path) {
		fi, err := os.Stat(f)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(fi.Size()).To(BeNumerically("<=", 1<<20), f)
		for _, ev := range readEvents(g, f) {
			kept = append(kept, string(ev.AuditID))
		}
	}
	g.Expect(kept).To(ContainElement(ids[len(ids)-1]), "the newest event is in the current file")
	g.Expect(kept).NotTo(ContainElement(ids[0]), "the oldest went with the backups beyond two")
	g.Expect(len(kept)).To(BeNumerically("<", len(ids)))
}

// AddFlags binds kube-apiserver's flag names.
func TestAddFlagsBindsKubeAPIServersFlagNames(t *testing.T) {
	g := NewWithT(t)
	o := NewOptions()
	fs := flag.NewFlagSet("proxy-server", flag.ContinueOnError)
	o.AddFlags(fs)
	g.Expect(fs.Parse([]string{
		"--audit-policy-file=/etc/audit/policy.yaml", "--audit-log-path=-", "--audit-log-maxage=7",
		"--audit-log-maxbackup=3", "--audit-log-maxsize=50", "--audit-log-compress", "--audit-log-mode=batch",
		"--audit-webhook-config-file=/etc/audit/webhook.kubeconfig", "--audit-webhook-mode=blocking-strict",
		"--audit-webhook-initial-backoff=2s",
	})).To(Succeed())
	g.Expect(o).To(Equal(Options{
		PolicyFile: "/etc/audit/policy.yaml", LogPath: "-", LogMaxAge: 7, LogMaxBackups: 3, LogMaxSize: 50,
		LogCompress: true, LogMode: ModeBatch, WebhookKubeconfig: "/etc/audit/webhook.kubeconfig",
		WebhookMode: ModeBlockingStrict, WebhookInitialBackoff: 2 * time.Second,
	}))
	defaults := NewOptions()
	fs = flag.NewFlagSet("proxy-server", flag.ContinueOnError)
	defaults.AddFlags(fs)
	g.Expect(fs.Lookup("audit-log-maxsize").DefValue).To(Equal("100"))
	g.Expect(fs.Lookup("audit-log-maxage").DefValue).To(Equal("366"))
	g.Expect(fs.Lookup("audit-webhook-mode").DefValue).To(Equal(ModeBatch))
}
