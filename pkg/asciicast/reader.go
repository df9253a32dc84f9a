package asciicast

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"time"
)

// Reader reads a recording: NewReader reads the header, Next each event.
type Reader struct {
	// Header is the recording's first line.
	Header Header
	br     *bufio.Reader
	line   int
	ended  bool // the last line read had no newline: the end of the recording
}

// NewReader reads the header of the recording r holds.
func NewReader(r io.Reader) (*Reader, error) {
	rd := &Reader{br: bufio.NewReaderSize(r, 64<<10)}
	line, err := rd.readLine()
	if errors.Is(err, io.EOF) {
		return nil, errors.New("asciicast: empty recording, no header")
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(line, &rd.Header); err != nil {
		return nil, fmt.Errorf("asciicast header: %w", err)
	}
	if rd.Header.Version != Version {
		return nil, fmt.Errorf("asciicast version %d is not supported, only %d", rd.Header.Version, Version)
	}
	return rd, nil
}

// Next reads the next event; io.EOF after the last. A last line that is not a whole event, the recording cut short
// while it was written, is an error that wraps io.ErrUnexpectedEOF.
func (r *Reader) Next() (Event, error) {
	line, err := r.readLine()
	if err != nil {
		return Event{}, err
	}
	var e Event
	if err := json.Unmarshal(line, &e); err != nil {
		if r.ended {
			return Event{}, fmt.Errorf("line %d: the recording ends mid-event: %w", r.line, io.ErrUnexpectedEOF)
		}
		return Event{}, fmt.Errorf("line %d: %w", r.line, err)
	}
	return e, nil
}

// readLine returns the next line that is not blank; io.EOF at the end.
func (r *Reader) readLine() ([]byte, error) {
	for {
		line, err := r.br.ReadBytes('\n')
		r.ended = err != nil
		if len(line) > 0 {
			r.line++
			if line = bytes.TrimSpace(line); len(line) > 0 {
				return line, nil
			}
		}
		if err != nil {
			return nil, err
		}
	}
}

// Decode reads a whole recording.
func Decode(r io.Reader) (Header, []Event, error) {
	rd, err := NewReader(r)
	if err != nil {
		return Header{}, nil, err
	}
	var events []Event
	for {
		e, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return rd.Header, events, nil
		}
		if err != nil {
			return rd.Header, events, err
		}
		events = append(events, e)
	}
}

// PlayOptions set how Play paces the output.
type PlayOptions struct {
	// Speed divides the recorded pauses: 1 plays in real time, 2 twice as fast; 0 writes everything at once.
	Speed float64
	// MaxIdle caps every pause of the recording before Speed applies; 0 keeps them.
	MaxIdle time.Duration
	// Sleep waits between outputs; default time.Sleep.
	Sleep func(time.Duration)
}

// Play writes the output events of the recording r holds to w, paced as opts say. A recording cut short in its last
// event is played to there, and then the error wraps io.ErrUnexpectedEOF.
func Play(w io.Writer, r io.Reader, opts PlayOptions) error {
	if opts.Speed < 0 || math.IsNaN(opts.Speed) || math.IsInf(opts.Speed, 0) {
		return fmt.Errorf("asciicast: speed %v is not a number of at least 0", opts.Speed)
	}
	if opts.Sleep == nil {
		opts.Sleep = time.Sleep
	}
	rd, err := NewReader(r)
	if err != nil {
		return err
	}
	// played is the recording's time with its pauses capped; shown is where the last output was written.
	var previous, played, shown time.Duration
	for {
		e, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		pause := max(e.Time-previous, 0)
		if opts.MaxIdle > 0 {
			pause = min(pause, opts.MaxIdle)
		}
		previous = e.Time
		played += pause
		if e.Type != Output {
			continue
		}
		if opts.Speed > 0 {
			if d := time.Duration(float64(played-shown) / opts.Speed); d > 0 {
				opts.Sleep(d)
			}
		}
		shown = played
		if _, err := io.WriteString(w, e.Data); err != nil {
			return err
		}
	}
}
