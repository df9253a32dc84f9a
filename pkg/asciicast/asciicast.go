// Package asciicast reads, writes and plays terminal recordings in the asciicast v2 format
// (https://docs.asciinema.org/manual/asciicast/v2/), the format asciinema and its web player read.
//
// A recording is a header object on the first line, then one event a line: [seconds since the start, type, data].
// The header of a recorded Kubernetes session names who ran what where under the key "kubernetes"; players ignore
// keys they do not know.
package asciicast

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
)

// Version is the asciicast version this package reads and writes.
const Version = 2

// Header is the first line of a recording.
type Header struct {
	// Version is always 2; the Writer sets it.
	Version int `json:"version"`
	// Width and Height are the terminal's columns and rows when the recording began.
	Width  int `json:"width"`
	Height int `json:"height"`
	// Timestamp is when the recording began, in Unix seconds.
	Timestamp int64 `json:"timestamp,omitempty"`
	// IdleTimeLimit is the longest pause, in seconds, that players should keep.
	IdleTimeLimit float64           `json:"idle_time_limit,omitempty"`
	Command       string            `json:"command,omitempty"`
	Title         string            `json:"title,omitempty"`
	Env           map[string]string `json:"env,omitempty"`
	// Kubernetes names the session of a recorded exec or attach.
	Kubernetes *Kubernetes `json:"kubernetes,omitempty"`
}

// Started is Timestamp as a time.
func (h Header) Started() time.Time { return time.Unix(h.Timestamp, 0) }

// Kubernetes says who ran what where in a recorded exec or attach.
type Kubernetes struct {
	Cluster   string   `json:"cluster"`
	User      string   `json:"user"`
	Groups    []string `json:"groups,omitempty"`
	Namespace string   `json:"namespace"`
	Pod       string   `json:"pod"`
	Container string   `json:"container,omitempty"`
	// Command is the argv of an exec; empty for an attach.
	Command []string `json:"command,omitempty"`
	// Subresource is exec or attach.
	Subresource string `json:"subresource"`
	// Via is the way into the cluster: user-server or aggregated.
	Via       string `json:"via,omitempty"`
	SessionID string `json:"sessionID"`
	// Replica is the proxy-server replica that carried the session.
	Replica string `json:"replica,omitempty"`
	TTY     bool   `json:"tty"`
}

// EventType is the second element of an event.
type EventType string

// The event types of asciicast v2.
const (
	// Output is what the terminal showed.
	Output EventType = "o"
	// Input is what was typed.
	Input EventType = "i"
	// Resize is a new terminal size, its data "WIDTHxHEIGHT".
	Resize EventType = "r"
	// Marker is a labelled point in the recording.
	Marker EventType = "m"
)

// Event is one line after the header.
type Event struct {
	// Time is the time since the start of the recording.
	Time time.Duration
	Type EventType
	Data string
}

// MarshalJSON writes the event as asciicast does: [seconds, type, data].
func (e Event) MarshalJSON() ([]byte, error) {
	var b []byte
	b = append(b, '[')
	b = appendSeconds(b, e.Time)
	b = append(b, ',', '"')
	b = appendString(b, nil, []byte(e.Type), false)
	b = append(b, '"', ',', '"')
	b = appendString(b, nil, []byte(e.Data), false)
	return append(b, '"', ']'), nil
}

// UnmarshalJSON reads [seconds, type, data].
func (e *Event) UnmarshalJSON(b []byte) error {
	var fields []json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return fmt.Errorf("asciicast event: %w", err)
	}
	if len(fields) != 3 {
		return fmt.Errorf("asciicast event: want [time, type, data], got %d elements", len(fields))
	}
	var seconds float64
	if err := json.Unmarshal(fields[0], &seconds); err != nil {
		return fmt.Errorf("asciicast event time: %w", err)
	}
	if seconds < 0 || math.IsNaN(seconds) || seconds > math.MaxInt64/float64(time.Second) {
		return fmt.Errorf("asciicast event time %v is out of range", seconds)
	}
	var typ, data string
	if err := json.Unmarshal(fields[1], &typ); err != nil {
		return fmt.Errorf("asciicast event type: %w", err)
	}
	if err := json.Unmarshal(fields[2], &data); err != nil {
		return fmt.Errorf("asciicast event data: %w", err)
	}
	*e = Event{Time: time.Duration(math.Round(seconds * float64(time.Second))), Type: EventType(typ), Data: data}
	return nil
}

// Size is the width and height of a resize event.
func (e Event) Size() (width, height int, err error) {
	if e.Type != Resize {
		return 0, 0, fmt.Errorf("a %q event has no size", e.Type)
	}
	for i := 0; i < len(e.Data); i++ {
		if e.Data[i] == 'x' {
			w, errW := strconv.Atoi(e.Data[:i])
			h, errH := strconv.Atoi(e.Data[i+1:])
			if err := errors.Join(errW, errH); err != nil {
				return 0, 0, fmt.Errorf("resize %q: %w", e.Data, err)
			}
			return w, h, nil
		}
	}
	return 0, 0, fmt.Errorf("resize %q is not WIDTHxHEIGHT", e.Data)
}

// appendSeconds writes d as seconds with microseconds, as asciinema does.
func appendSeconds(b []byte, d time.Duration) []byte {
	return strconv.AppendFloat(b, d.Seconds(), 'f', 6, 64)
}
