package sessionrec

import (
	"fmt"
	"io"
	"os"
	"path"
	"strings"
)

// Sink stores recordings.
type Sink interface {
	// Create opens a new recording of the session m names; the recorder writes it and closes it once.
	Create(m Meta) (io.WriteCloser, error)
	// Remove deletes the recording Create made for m, which the recorder has closed: the session did not begin
	// (Session.Discard).
	Remove(m Meta) error
}

// DirSink stores each recording in a file of its own, <Dir>/<cluster>/<YYYY-MM-DD>/<session ID>.cast, the day the
// session started in UTC. Directories are made 0700 and files 0600; Dir is made if it does not exist. Nothing is
// opened through a symbolic link that leads out of Dir, and a recording never replaces another.
type DirSink struct{ Dir string }

// Create opens the recording's file.
func (d DirSink) Create(m Meta) (io.WriteCloser, error) {
	rel, err := RecordingPath(m)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(d.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("make the recordings directory: %w", err)
	}
	root, err := os.OpenRoot(d.Dir)
	if err != nil {
		return nil, fmt.Errorf("open the recordings directory: %w", err)
	}
	defer func() { _ = root.Close() }()
	if err := root.MkdirAll(path.Dir(rel), 0o700); err != nil {
		return nil, fmt.Errorf("make the directory of recording %s: %w", rel, err)
	}
	f, err := root.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create recording %s: %w", rel, err)
	}
	return f, nil
}

// Remove deletes the recording's file; the directories stay.
func (d DirSink) Remove(m Meta) error {
	rel, err := RecordingPath(m)
	if err != nil {
		return err
	}
	root, err := os.OpenRoot(d.Dir)
	if err != nil {
		return fmt.Errorf("open the recordings directory: %w", err)
	}
	defer func() { _ = root.Close() }()
	if err := root.Remove(rel); err != nil {
		return fmt.Errorf("remove recording %s: %w", rel, err)
	}
	return nil
}

// RecordingPath is where DirSink stores the recording of m, relative to its Dir, with slashes. It refuses a cluster
// name or session ID that is empty, "." or "..", or holds a slash, backslash or NUL: the caller validated the cluster
// name, but a path is no place to trust that.
func RecordingPath(m Meta) (string, error) {
	for _, name := range []struct{ what, value string }{{"cluster name", m.Cluster}, {"session ID", m.SessionID}} {
		if name.value == "" || name.value == "." || name.value == ".." || strings.ContainsAny(name.value, "/\\\x00") {
			return "", fmt.Errorf("%s %q cannot name a recording file", name.what, name.value)
		}
	}
	return m.Cluster + "/" + m.Started.UTC().Format("2006-01-02") + "/" + m.SessionID + ".cast", nil
}
