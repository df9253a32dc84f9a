package benchplot

import (
	"encoding/xml"
	"errors"
	"io"
	"strings"
)

// Elements decodes an SVG and counts its elements by name, for tests of plots; it fails on XML that does not parse.
func Elements(svg string) (map[string]int, error) {
	d := xml.NewDecoder(strings.NewReader(svg))
	out := map[string]int{}
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if s, ok := tok.(xml.StartElement); ok {
			out[s.Name.Local]++
		}
	}
}
