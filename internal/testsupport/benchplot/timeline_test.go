package benchplot

import (
	"bytes"
	"encoding/xml"
	"io"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

func TestTimelineDrawsEveryEventOverItsBands(t *testing.T) {
	g := NewWithT(t)
	var b bytes.Buffer
	err := Timeline{Title: "failures <soak>", XLabel: "seconds", Span: 600,
		Lanes: []Lane{{Name: "cluster1 through the gRPC frontend"}, {Name: "cluster1 through the user-server", At: []float64{12, 13, 700}}},
		Bands: []Band{{Kind: "SIGKILL", From: 10, To: 40}, {Kind: "network cut", From: 100, To: 130}, {Kind: "SIGKILL", From: 300, To: 300}},
	}.WriteSVG(&b)
	g.Expect(err).NotTo(HaveOccurred())
	svg := b.String()
	els := elements(g, svg)
	g.Expect(els["rect"]).To(Equal(1+3+3), "the background, a band per interval, a legend key for the events and per kind")
	g.Expect(strings.Count(svg, `stroke="`+eventColor+`"`)).To(Equal(3), "a tick per event, one beyond the span drawn at its end")
	g.Expect(svg).To(ContainSubstring("failures &lt;soak&gt;"), "text is escaped")
	g.Expect(svg).To(ContainSubstring(">network cut<"))
	g.Expect(strings.Count(svg, ">SIGKILL</text>")).To(Equal(1), "a kind is named once in the legend")
	g.Expect(svg).To(ContainSubstring(">cluster1 through the gRPC frontend<"), "a lane without events is drawn too")
}

func TestTimelineRejectsWhatItCannotDraw(t *testing.T) {
	g := NewWithT(t)
	lanes := []Lane{{Name: "a"}}
	g.Expect(Timeline{Title: "t", Lanes: lanes}.WriteSVG(io.Discard)).To(MatchError(ContainSubstring("span 0 is not positive")))
	g.Expect(Timeline{Title: "t", Span: 1}.WriteSVG(io.Discard)).To(MatchError(ContainSubstring("no lanes")))
	g.Expect(Timeline{Title: "t", Span: 1, Lanes: lanes, Bands: []Band{{Kind: "k", From: 2, To: 1}}}.WriteSVG(io.Discard)).
		To(MatchError(ContainSubstring(`band "k" ends at 1 before it starts at 2`)))
}

// The picture widens to fit the legend's longest name, and keeps its width when every name fits.
func TestThePictureFitsTheLegendsLongestName(t *testing.T) {
	g := NewWithT(t)
	widthOf := func(kinds ...string) int {
		var b bytes.Buffer
		var bands []Band
		for _, k := range kinds {
			bands = append(bands, Band{Kind: k, From: 1, To: 2})
		}
		g.Expect(Timeline{Title: "t", Span: 10, Lanes: []Lane{{Name: "a"}}, Bands: bands}.WriteSVG(&b)).To(Succeed())
		var svg struct {
			Width int `xml:"width,attr"`
		}
		g.Expect(xml.Unmarshal(b.Bytes(), &svg)).To(Succeed())
		return svg.Width
	}
	g.Expect(widthOf("SIGKILL")).To(Equal(width))
	long := "proxy-server rolling update"
	g.Expect(widthOf("SIGKILL", long)).To(BeNumerically(">=", legendX+int(float64(len(long))*charWidth)),
		"the name's end is inside the picture")
}
