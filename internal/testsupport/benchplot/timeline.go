package benchplot

import (
	"fmt"
	"html"
	"io"
	"strings"
)

// Timeline draws events along a time axis, a lane per row, over shaded bands: a soak's failed requests, a lane per
// request loop, against its faults, a band per fault coloured by its kind.
type Timeline struct {
	Title, XLabel string
	// Span is the end of the time axis, which starts at 0; times outside it are drawn at its ends.
	Span  float64
	Lanes []Lane
	Bands []Band
}

// Lane is one row of events, at their times.
type Lane struct {
	Name string
	At   []float64
}

// Band is an interval of a kind. Bands of one kind share a colour, named once in the legend.
type Band struct {
	Kind     string
	From, To float64
}

const (
	// eventColor marks an event, which the legend names eventsName; bandOpacity lets overlapping bands and the
	// events show through.
	eventColor  = "#d62728"
	eventsName  = "failed request"
	bandOpacity = 0.4
)

// bandColors are the kinds' colours, in the order the kinds first appear.
var bandColors = []string{"#aec7e8", "#ffbb78", "#98df8a", "#c5b0d5", "#c49c94", "#f7b6d2", "#c7c7c7", "#dbdb8d",
	"#9edae5", "#ff9896", "#7fb3d5", "#f0b27a"}

// WriteSVG draws the chart.
func (t Timeline) WriteSVG(w io.Writer) error {
	if t.Span <= 0 {
		return fmt.Errorf("chart %q: span %g is not positive", t.Title, t.Span)
	}
	if len(t.Lanes) == 0 {
		return fmt.Errorf("chart %q: no lanes", t.Title)
	}
	for _, band := range t.Bands {
		if band.To < band.From {
			return fmt.Errorf("chart %q: band %q ends at %g before it starts at %g", t.Title, band.Kind, band.To, band.From)
		}
	}
	xscale := linear(0, niceMax(t.Span))
	x := func(v float64) float64 { return left + plotWidth*xscale.at(min(max(v, 0), t.Span)) }
	colorOf := map[string]string{}
	var kinds []string
	for _, band := range t.Bands {
		if _, ok := colorOf[band.Kind]; !ok {
			colorOf[band.Kind] = bandColors[len(kinds)%len(bandColors)]
			kinds = append(kinds, band.Kind)
		}
	}
	var b strings.Builder
	header(&b, t.Title, append([]string{eventsName}, kinds...))
	for _, band := range t.Bands {
		color := colorOf[band.Kind]
		x0, x1 := x(band.From), x(band.To)
		fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s" fill-opacity="%g"><title>%s</title></rect>`+"\n",
			x0, top, max(x1-x0, 1), plotHeight, color, bandOpacity, html.EscapeString(band.Kind))
	}
	lane := float64(plotHeight) / float64(len(t.Lanes))
	for i, l := range t.Lanes {
		y := top + lane*(float64(i)+0.5)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s"/>`+"\n", left, y, left+plotWidth, y, gridColor)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" font-family="sans-serif" font-size="10" fill="%s">%s</text>`+"\n",
			left+4, y-6, labelColor, html.EscapeString(l.Name))
		for _, at := range l.At {
			px := x(at)
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1.5"/>`+"\n", px, y-5, px, y+5, eventColor)
		}
	}
	for _, tick := range xscale.ticks {
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" %s fill="%s">%s</text>`+"\n",
			left+plotWidth*xscale.at(tick), top+plotHeight+18, fontStyle, labelColor, format(tick))
	}
	axes(&b, t.XLabel, "")
	legend(&b, 0, eventsName, eventColor)
	for i, kind := range kinds {
		legend(&b, i+1, kind, colorOf[kind])
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}
