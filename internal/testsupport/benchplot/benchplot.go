// Package benchplot draws the benchmarks' figures as small SVG charts, so docs/performance.md can show them without a
// plotting tool: a line chart of series over a numeric axis (a fleet size), a bar chart of named values, one bar per
// name or a group of bars per name, and a timeline of events against intervals (timeline.go). The figures themselves
// are kept as JSON beside the plots (figures.go), so the plots can be drawn again without measuring.
package benchplot

import (
	"fmt"
	"html"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Series is one line of a line chart: Y[i] is the value at the chart's X[i].
type Series struct {
	Name string
	Y    []float64
}

// Line is a line chart.
type Line struct {
	Title, XLabel, YLabel string
	X                     []float64
	Series                []Series
	// LogY draws the Y axis on a log scale (every value must be positive).
	LogY bool
}

// Bar is a bar chart of named values: one bar per name from Values, or, with Series instead, a group per name with a
// bar of each series (Series[j].Y[i] is series j's value for Names[i]).
type Bar struct {
	Title, YLabel string
	Names         []string
	Values        []float64
	Series        []Series
}

const (
	width, height                    = 640, 360
	left, right, top, bottom         = 80, 180, 40, 50
	plotWidth, plotHeight            = width - left - right, height - top - bottom
	fontStyle                        = `font-family="sans-serif" font-size="12"`
	axisColor, gridColor, labelColor = "#333", "#ddd", "#333"
	// charWidth is about how wide a character of fontStyle is, to tell when a label needs two lines.
	charWidth = 6.5
	// legendX is where the legend's names start; legendPad is the margin right of the longest.
	legendX, legendPad = left + plotWidth + 32, 8
)

// colors of the series, in order.
var colors = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"}

// WriteSVG draws the chart.
func (l Line) WriteSVG(w io.Writer) error {
	if len(l.X) == 0 {
		return fmt.Errorf("chart %q: no points", l.Title)
	}
	for _, s := range l.Series {
		if len(s.Y) != len(l.X) {
			return fmt.Errorf("chart %q: series %q has %d values for %d points", l.Title, s.Name, len(s.Y), len(l.X))
		}
		for _, y := range s.Y {
			if l.LogY && y <= 0 {
				return fmt.Errorf("chart %q: series %q has %g on a log axis", l.Title, s.Name, y)
			}
		}
	}
	xmin, xmax := bounds(l.X)
	var ys []float64
	for _, s := range l.Series {
		ys = append(ys, s.Y...)
	}
	ymin, ymax := bounds(ys)
	yscale := linear(0, niceMax(ymax))
	if l.LogY {
		yscale = logScale(math.Pow(10, math.Floor(math.Log10(ymin))), math.Pow(10, math.Ceil(math.Log10(ymax))))
	}
	xscale := linear(xmin, xmax)
	if xmin == xmax {
		xscale = linear(xmin-1, xmax+1)
	}
	var names []string
	for _, s := range l.Series {
		names = append(names, s.Name)
	}
	var b strings.Builder
	header(&b, l.Title, names)
	yGrid(&b, yscale)
	for _, x := range l.X {
		px := left + plotWidth*xscale.at(x)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" %s fill="%s">%s</text>`+"\n", px, top+plotHeight+18, fontStyle, labelColor, format(x))
	}
	axes(&b, l.XLabel, l.YLabel)
	for i, s := range l.Series {
		color := colors[i%len(colors)]
		var points []string
		for j, x := range l.X {
			px, py := left+plotWidth*xscale.at(x), top+plotHeight*(1-yscale.at(s.Y[j]))
			points = append(points, fmt.Sprintf("%.1f,%.1f", px, py))
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", px, py, color)
		}
		fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", strings.Join(points, " "), color)
		legend(&b, i, s.Name, color)
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteSVG draws the chart.
func (c Bar) WriteSVG(w io.Writer) error {
	if len(c.Series) > 0 {
		return c.writeGroups(w)
	}
	if len(c.Names) == 0 || len(c.Names) != len(c.Values) {
		return fmt.Errorf("chart %q: %d names for %d values", c.Title, len(c.Names), len(c.Values))
	}
	_, ymax := bounds(c.Values)
	yscale := linear(0, niceMax(ymax))
	var b strings.Builder
	header(&b, c.Title, c.Names)
	yGrid(&b, yscale)
	slot := float64(plotWidth) / float64(len(c.Values))
	for i, v := range c.Values {
		color := colors[i%len(colors)]
		bar(&b, yscale, left+slot*float64(i)+slot*0.15, slot*0.7, v, color)
		legend(&b, i, c.Names[i], color)
	}
	axes(&b, "", c.YLabel)
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// writeGroups draws a group of bars per name, the series in the legend and the names under their groups.
func (c Bar) writeGroups(w io.Writer) error {
	if len(c.Values) > 0 {
		return fmt.Errorf("chart %q: both values and series", c.Title)
	}
	if len(c.Names) == 0 {
		return fmt.Errorf("chart %q: no names", c.Title)
	}
	var ys []float64
	var names []string
	for _, s := range c.Series {
		if len(s.Y) != len(c.Names) {
			return fmt.Errorf("chart %q: series %q has %d values for %d names", c.Title, s.Name, len(s.Y), len(c.Names))
		}
		ys = append(ys, s.Y...)
		names = append(names, s.Name)
	}
	_, ymax := bounds(ys)
	yscale := linear(0, niceMax(ymax))
	var b strings.Builder
	header(&b, c.Title, names)
	yGrid(&b, yscale)
	slot := float64(plotWidth) / float64(len(c.Names))
	barWidth := slot * 0.8 / float64(len(c.Series))
	for i, name := range c.Names {
		x := left + slot*float64(i) + slot*0.1
		for j, s := range c.Series {
			bar(&b, yscale, x+barWidth*float64(j), barWidth, s.Y[i], colors[j%len(colors)])
		}
		groupLabel(&b, left+slot*(float64(i)+0.5), slot, name)
	}
	for j, s := range c.Series {
		legend(&b, j, s.Name, colors[j%len(colors)])
	}
	axes(&b, "", c.YLabel)
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// bar draws a bar of value v from the X axis up, v written above it.
func bar(b *strings.Builder, yscale scale, x, width, v float64, color string) {
	h := plotHeight * yscale.at(v)
	fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`+"\n", x, top+plotHeight-h, width, h, color)
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle" %s fill="%s">%s</text>`+"\n", x+width/2, top+plotHeight-h-4, fontStyle, labelColor, format(v))
}

// groupLabel writes name centred at x under the X axis, split at the space nearest its middle where it is wider than
// the group's slot (the bottom margin holds two lines).
func groupLabel(b *strings.Builder, x, slot float64, name string) {
	lines := []string{name}
	if float64(len(name))*charWidth > slot {
		cut, mid := -1, len(name)/2
		for i, r := range name {
			if r == ' ' && (cut < 0 || abs(i-mid) < abs(cut-mid)) {
				cut = i
			}
		}
		if cut > 0 {
			lines = []string{name[:cut], name[cut+1:]}
		}
	}
	for k, line := range lines {
		fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle" %s fill="%s">%s</text>`+"\n", x, top+plotHeight+18+15*k, fontStyle, labelColor,
			html.EscapeString(line))
	}
}

func abs(i int) int { return max(i, -i) }

// header opens the picture, wider than width when the longest of the legend's names would not fit.
func header(b *strings.Builder, title string, legendNames []string) {
	w := width
	for _, name := range legendNames {
		w = max(w, legendX+int(math.Ceil(float64(len(name))*charWidth))+legendPad)
	}
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d">`+"\n", w, height, w, height)
	fmt.Fprintf(b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, height)
	fmt.Fprintf(b, `<text x="%d" y="22" %s font-weight="bold" fill="%s">%s</text>`+"\n", left, fontStyle, labelColor, html.EscapeString(title))
}

// yGrid draws a line across the plot and a label at each of the scale's ticks.
func yGrid(b *strings.Builder, yscale scale) {
	for _, t := range yscale.ticks {
		y := top + plotHeight*(1-yscale.at(t))
		fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s"/>`+"\n", left, y, left+plotWidth, y, gridColor)
		fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="end" %s fill="%s">%s</text>`+"\n", left-6, y+4, fontStyle, labelColor, format(t))
	}
}

func axes(b *strings.Builder, xLabel, yLabel string) {
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s"/>`+"\n", left, top, left, top+plotHeight, axisColor)
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s"/>`+"\n", left, top+plotHeight, left+plotWidth, top+plotHeight, axisColor)
	if xLabel != "" {
		fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="middle" %s fill="%s">%s</text>`+"\n", left+plotWidth/2, height-8, fontStyle, labelColor, html.EscapeString(xLabel))
	}
	fmt.Fprintf(b, `<text transform="translate(16 %d) rotate(-90)" text-anchor="middle" %s fill="%s">%s</text>`+"\n", top+plotHeight/2, fontStyle, labelColor, html.EscapeString(yLabel))
}

func legend(b *strings.Builder, i int, name, color string) {
	y := top + 10 + 20*i
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="12" height="12" fill="%s"/>`+"\n", left+plotWidth+14, y-10, color)
	fmt.Fprintf(b, `<text x="%d" y="%d" %s fill="%s">%s</text>`+"\n", legendX, y, fontStyle, labelColor, html.EscapeString(name))
}

// scale maps a value to [0, 1] along an axis, with the values to label.
type scale struct {
	at    func(float64) float64
	ticks []float64
}

func linear(lo, hi float64) scale {
	step := (hi - lo) / 4
	ticks := make([]float64, 0, 5)
	for i := 0; i <= 4; i++ {
		ticks = append(ticks, lo+step*float64(i))
	}
	return scale{at: func(v float64) float64 { return (v - lo) / (hi - lo) }, ticks: ticks}
}

func logScale(lo, hi float64) scale {
	var ticks []float64
	for t := lo; t <= hi*1.0001; t *= 10 {
		ticks = append(ticks, t)
	}
	l, h := math.Log10(lo), math.Log10(hi)
	return scale{at: func(v float64) float64 { return (math.Log10(v) - l) / (h - l) }, ticks: ticks}
}

// niceMax rounds v up to 1, 2 or 5 times a power of ten, so that the ticks at quarters read well.
func niceMax(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 4, 5, 8, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

func bounds(v []float64) (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, x := range v {
		lo, hi = math.Min(lo, x), math.Max(hi, x)
	}
	return lo, hi
}

// format writes a tick or value with at most three significant digits and thousands separators.
func format(v float64) string {
	switch a := math.Abs(v); {
	case a == 0:
		return "0"
	case a >= 1000:
		s := fmt.Sprintf("%.0f", v)
		var out []byte
		for i := range len(s) {
			if i > 0 && (len(s)-i)%3 == 0 && s[i-1] != '-' {
				out = append(out, ',')
			}
			out = append(out, s[i])
		}
		return string(out)
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return strings.TrimSuffix(fmt.Sprintf("%.1f", v), ".0")
	default:
		return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.2f", v), "0"), ".")
	}
}

// Chart is a Line or a Bar.
type Chart interface{ WriteSVG(io.Writer) error }

// WriteFiles draws every chart to the file of its name in dir, and returns the names written, sorted.
func WriteFiles(dir string, charts map[string]Chart) ([]string, error) {
	var names []string
	for name, chart := range charts {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		err = chart.WriteSVG(f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		names = append(names, name)
	}
	slices.Sort(names)
	return names, nil
}
