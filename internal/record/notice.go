package record

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"
)

// The death notice: a kernel that dies while no cell runs (killed over its
// GPU memory limit by a worker thread's allocation, OOM-killed, crashed)
// has no cell to tell why; Jupyter shows only "the kernel restarted". Its
// supervisor leaves what it would have told the cell in
// <state dir>/<kernel id>.notice, and the next supervisor of that kernel
// (Jupyter's restarter starts it at once, with the same kernel id) shows
// it in the first cell the user runs (docs/design.md#kernel-death).
//
// The file is JSON, {"at": time, "text": text}. It is read back only by
// the same user's supervisor, through Dir.read's checks; the text is
// shown in the user's own notebook, so it is bounded and stripped of
// control characters, and a notice older than NoticeFresh is dropped: the
// kernel it was about was not restarted (its server stopped, or the
// restarter gave up).
const (
	NoticeFresh   = 2 * time.Minute
	noticeMaxText = 4096
)

func noticeName(id string) string { return id + ".notice" }

type notice struct {
	At   time.Time `json:"at"`
	Text string    `json:"text"`
}

// ErrStaleNotice is ParseNotice's answer for a notice written longer than
// NoticeFresh before now (or implausibly after it).
var ErrStaleNotice = errors.New("notice is stale")

// WriteNotice leaves text, written at at, for the next supervisor of kernel
// id.
func (d *Dir) WriteNotice(id, text string, at time.Time) error {
	if !ValidKernelID(id) {
		return fmt.Errorf("%q: not a kernel id", id)
	}
	b, err := json.Marshal(notice{At: at, Text: text})
	if err != nil {
		return err
	}
	return d.write(noticeName(id), b)
}

// TakeNotice returns and removes the notice for kernel id; "" and no error
// when there is none. A notice that cannot be used (stale, malformed, not
// a file the user wrote) is removed too, and its error returned.
func (d *Dir) TakeNotice(id string, now time.Time) (string, error) {
	if !ValidKernelID(id) {
		return "", nil
	}
	b, err := d.read(noticeName(id))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", nil
		}
		_ = d.remove(noticeName(id))
		return "", fmt.Errorf("notice of kernel %s: %w", id, err)
	}
	_ = d.remove(noticeName(id))
	text, err := ParseNotice(b, now)
	if err != nil {
		return "", fmt.Errorf("notice of kernel %s: %w", id, err)
	}
	return text, nil
}

// DropStaleNotices removes the notices in d that no supervisor will take:
// stale or unreadable ones.
func (d *Dir) DropStaleNotices(now time.Time) (dropped int) {
	names, _ := d.names(".notice")
	for _, name := range names {
		b, err := d.read(name)
		if err == nil {
			_, err = ParseNotice(b, now)
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) && d.remove(name) == nil {
			dropped++
		}
	}
	return dropped
}

// ParseNotice checks a notice file's content and returns its text, fit to
// show in a notebook.
func ParseNotice(b []byte, now time.Time) (string, error) {
	var n notice
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&n); err != nil {
		return "", fmt.Errorf("not a notice: %w", err)
	}
	if dec.More() {
		return "", errors.New("not a notice: data after it")
	}
	switch {
	case n.Text == "":
		return "", errors.New("not a notice: no text")
	case len(n.Text) > noticeMaxText:
		return "", fmt.Errorf("not a notice: %d bytes of text, more than %d", len(n.Text), noticeMaxText)
	case n.At.IsZero():
		return "", errors.New("not a notice: no time")
	}
	if age := now.Sub(n.At); age > NoticeFresh || age < -time.Minute {
		return "", fmt.Errorf("%w: written at %s", ErrStaleNotice, n.At.Format(time.RFC3339))
	}
	// encoding/json has replaced invalid UTF-8 with U+FFFD. Lines stay
	// lines; every other control character (escape sequences
	// for a terminal or for the notebook's ANSI rendering) is replaced.
	return strings.Map(func(r rune) rune {
		if r == '\n' {
			return r
		}
		return controlToQ(r)
	}, n.Text), nil
}
