package benchplot

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
)

// elements counts the elements of svg by name; it fails on XML that does not parse.
func elements(g Gomega, svg string) map[string]int {
	out, err := Elements(svg)
	g.Expect(err).NotTo(HaveOccurred(), svg)
	return out
}

func TestLineDrawsEverySeriesAtEveryPoint(t *testing.T) {
	g := NewWithT(t)
	var b bytes.Buffer
	err := Line{Title: "CPU per round <ms>", XLabel: "agents", YLabel: "ms", X: []float64{1000, 10000}, LogY: true,
		Series: []Series{{Name: "ours", Y: []float64{372, 3834}}, {Name: "previous", Y: []float64{6754, 64583}}}}.WriteSVG(&b)
	g.Expect(err).NotTo(HaveOccurred())
	els := elements(g, b.String())
	g.Expect(els["polyline"]).To(Equal(2))
	g.Expect(els["circle"]).To(Equal(4))
	g.Expect(b.String()).To(ContainSubstring("CPU per round &lt;ms&gt;"), "text is escaped")
	g.Expect(b.String()).To(ContainSubstring(">previous<"))
	g.Expect(b.String()).To(ContainSubstring(">10,000<"), "x labels are the points")
	g.Expect(b.String()).To(ContainSubstring(">100,000<"), "a log axis ends at the power of ten above the largest value")
}

func TestLineRejectsWhatItCannotDraw(t *testing.T) {
	g := NewWithT(t)
	g.Expect(Line{Title: "t"}.WriteSVG(io.Discard)).To(MatchError(ContainSubstring("no points")))
	g.Expect(Line{Title: "t", X: []float64{1, 2}, Series: []Series{{Name: "s", Y: []float64{1}}}}.WriteSVG(io.Discard)).
		To(MatchError(ContainSubstring(`series "s" has 1 values for 2 points`)))
	g.Expect(Line{Title: "t", X: []float64{1}, LogY: true, Series: []Series{{Name: "s", Y: []float64{0}}}}.WriteSVG(io.Discard)).
		To(MatchError(ContainSubstring("log axis")))
}

func TestBarDrawsOneBarPerValue(t *testing.T) {
	g := NewWithT(t)
	var b bytes.Buffer
	g.Expect(Bar{Title: "req/s", YLabel: "requests/s", Names: []string{"raw ANP", "full path"}, Values: []float64{6593, 5042}}.
		WriteSVG(&b)).To(Succeed())
	els := elements(g, b.String())
	g.Expect(els["rect"]).To(Equal(1+2+2), "the background, a bar and a legend key per value")
	g.Expect(b.String()).To(ContainSubstring(">6,593<"))
	g.Expect(Bar{Title: "t", Names: []string{"a"}}.WriteSVG(io.Discard)).To(MatchError(ContainSubstring("1 names for 0 values")))
}

func TestBarWithSeriesDrawsAGroupPerNameAndABarPerSeries(t *testing.T) {
	g := NewWithT(t)
	var b bytes.Buffer
	g.Expect(Bar{Title: "latency", YLabel: "us", Names: []string{"raw ANP tunnel", "full path: user-server to agent"},
		Series: []Series{{Name: "p50", Y: []float64{212, 388}}, {Name: "p99", Y: []float64{1450, 2210}}}}.WriteSVG(&b)).To(Succeed())
	els := elements(g, b.String())
	g.Expect(els["rect"]).To(Equal(1+2*2+2), "the background, a bar per name and series, a legend key per series")
	g.Expect(b.String()).To(ContainSubstring(">p99<"), "the series are the legend")
	g.Expect(b.String()).To(ContainSubstring(">raw ANP tunnel<"), "a name that fits its group is one line under it")
	g.Expect(b.String()).To(ContainSubstring(">full path:<"), "a longer name is split at the space nearest its middle")
	g.Expect(b.String()).To(ContainSubstring(">user-server to agent<"))
	g.Expect(b.String()).To(ContainSubstring(">2,210<"), "every bar has its value")
}

func TestBarRejectsSeriesThatDoNotMatchTheNames(t *testing.T) {
	g := NewWithT(t)
	g.Expect(Bar{Title: "t", Names: []string{"a", "b"}, Series: []Series{{Name: "s", Y: []float64{1}}}}.WriteSVG(io.Discard)).
		To(MatchError(ContainSubstring(`series "s" has 1 values for 2 names`)))
	g.Expect(Bar{Title: "t", Series: []Series{{Name: "s"}}}.WriteSVG(io.Discard)).To(MatchError(ContainSubstring("no names")))
	g.Expect(Bar{Title: "t", Names: []string{"a"}, Values: []float64{1}, Series: []Series{{Name: "s", Y: []float64{1}}}}.WriteSVG(io.Discard)).
		To(MatchError(ContainSubstring("both values and series")))
}

func TestFormatKeepsThreeDigitsOrSoAndGroupsThousands(t *testing.T) {
	g := NewWithT(t)
	for v, want := range map[float64]string{0: "0", 0.25: "0.25", 3.5: "3.5", 12: "12", 12.34: "12.3", 371.6: "372", 64583.4: "64,583", 100000: "100,000"} {
		g.Expect(format(v)).To(Equal(want), "%g", v)
	}
}

func TestWriteFilesDrawsEveryChartToItsFile(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	names, err := WriteFiles(dir, map[string]Chart{
		"b.svg": Bar{Title: "bars", Names: []string{"x"}, Values: []float64{1}},
		"a.svg": Line{Title: "lines", X: []float64{1, 2}, Series: []Series{{Name: "s", Y: []float64{1, 2}}}},
	})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(names).To(Equal([]string{"a.svg", "b.svg"}))
	for _, name := range names {
		raw, err := os.ReadFile(filepath.Join(dir, name))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(elements(g, string(raw))).To(HaveKey("svg"))
	}

	_, err = WriteFiles(dir, map[string]Chart{"bad.svg": Line{Title: "no points"}})
	g.Expect(err).To(MatchError(ContainSubstring("bad.svg")), "the error names the file")
}

func TestFiguresGoBackAsTheyWereWritten(t *testing.T) {
	g := NewWithT(t)
	path := filepath.Join(t.TempDir(), "new-folder", "figures.json")
	t.Setenv("BENCH_OUT", path)
	g.Expect(FiguresPath("ignored.json")).To(Equal(path), "BENCH_OUT names the file")

	type figures struct{ Clusters []int }
	g.Expect(WriteFigures(path, figures{Clusters: []int{1000, 10000}})).To(Succeed())
	var back figures
	g.Expect(ReadFigures(path, &back)).To(Succeed())
	g.Expect(back.Clusters).To(Equal([]int{1000, 10000}))

	g.Expect(ReadFigures(filepath.Join(t.TempDir(), "none.json"), &back)).To(MatchError(ContainSubstring("no figures of an earlier run")))
	g.Expect(os.WriteFile(path, []byte("{"), 0o644)).To(Succeed())
	g.Expect(ReadFigures(path, &back)).To(MatchError(ContainSubstring(path)))
}
