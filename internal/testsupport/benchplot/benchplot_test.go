package benchplot

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

// elements decodes svg and counts its elements by name; it fails on XML that does not parse.
func elements(g Gomega, svg string) map[string]int {
	d := xml.NewDecoder(strings.NewReader(svg))
	out := map[string]int{}
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			return out
		}
		g.Expect(err).NotTo(HaveOccurred(), svg)
		if s, ok := tok.(xml.StartElement); ok {
			out[s.Name.Local]++
		}
	}
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

func TestFormatKeepsThreeDigitsOrSoAndGroupsThousands(t *testing.T) {
	g := NewWithT(t)
	for v, want := range map[float64]string{0: "0", 0.25: "0.25", 3.5: "3.5", 12: "12", 12.34: "12.3", 371.6: "372", 64583.4: "64,583", 100000: "100,000"} {
		g.Expect(format(v)).To(Equal(want), "%g", v)
	}
}
