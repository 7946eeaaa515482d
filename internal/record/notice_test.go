package record

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const noticeID = "5f1c7a0e-0b7e-4d1e-9c55-3d2b1f7a9e01"

// A notice is taken once, by the next supervisor of the same kernel, and
// removed; what it shows cannot carry escape sequences.
func TestNoticeIsTakenOnce(t *testing.T) {
	d, dir := openTestDir(t)
	now := time.Now()
	if text, err := d.TakeNotice(noticeID, now); text != "" || err != nil {
		t.Fatalf("TakeNotice with none = %q, %v", text, err)
	}
	text := "tfgpu-kernel: the previous kernel stopped\x1b[2J at 18:31:57\n\tfigures\x07\n"
	if err := d.WriteNotice(noticeID, text, now.Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, noticeID+".notice"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("notice file: %v, %v; want mode 0600", fi, err)
	}
	if err := d.WriteNotice("../x", text, now); err == nil {
		t.Error("WriteNotice took a kernel id with a path in it")
	}
	got, err := d.TakeNotice(noticeID, now)
	if want := "tfgpu-kernel: the previous kernel stopped?[2J at 18:31:57\n?figures?\n"; got != want || err != nil {
		t.Fatalf("TakeNotice = %q, %v; want %q", got, err, want)
	}
	if _, err := os.Lstat(filepath.Join(dir, noticeID+".notice")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the notice is still there after it was taken: %v", err)
	}
	if got, err := d.TakeNotice(noticeID, now); got != "" || err != nil {
		t.Fatalf("second TakeNotice = %q, %v", got, err)
	}
}

// A notice nobody took in time is about a kernel that was not restarted:
// it is dropped, never shown to a later kernel of the same id.
func TestStaleNoticesAreDropped(t *testing.T) {
	d, dir := openTestDir(t)
	now := time.Now()
	if err := d.WriteNotice(noticeID, "old news", now.Add(-NoticeFresh-time.Second)); err != nil {
		t.Fatal(err)
	}
	if got, err := d.TakeNotice(noticeID, now); got != "" || !errors.Is(err, ErrStaleNotice) {
		t.Fatalf("TakeNotice(stale) = %q, %v; want ErrStaleNotice", got, err)
	}
	if _, err := os.Lstat(filepath.Join(dir, noticeID+".notice")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the stale notice was left: %v", err)
	}

	fresh, stale := "11111111-0000-0000-0000-000000000000", "22222222-0000-0000-0000-000000000000"
	d.WriteNotice(fresh, "fresh", now)
	d.WriteNotice(stale, "stale", now.Add(-time.Hour))
	os.WriteFile(filepath.Join(dir, "33333333-0000-0000-0000-000000000000.notice"), []byte("{"), 0o600)
	if n := d.DropStaleNotices(now); n != 2 {
		t.Errorf("DropStaleNotices = %d, want 2 (the stale and the malformed one)", n)
	}
	if got, err := d.TakeNotice(fresh, now); got != "fresh" || err != nil {
		t.Errorf("the fresh notice = %q, %v after DropStaleNotices", got, err)
	}
}

// Planted notices (a link, another user's file, a FIFO) are refused and
// removed; what they point to is neither read nor removed.
func TestPlantedNoticesAreRefused(t *testing.T) {
	requireRootUser(t)
	d, dir := openTestDir(t)
	now := time.Now()
	good, _ := json.Marshal(notice{At: now, Text: "planted"})
	checkPlanted(t, filepath.Join(dir, noticeID+".notice"), good, nil, true, func(how string) {
		if got, err := d.TakeNotice(noticeID, now); got != "" || err == nil {
			t.Errorf("%s: TakeNotice = %q, %v; want refused", how, got, err)
		}
	})
}

func TestParseNotice(t *testing.T) {
	now := time.Now()
	enc := func(at time.Time, text string) []byte { b, _ := json.Marshal(notice{At: at, Text: text}); return b }
	if got, err := ParseNotice(enc(now, "why"), now); got != "why" || err != nil {
		t.Fatalf("ParseNotice(good) = %q, %v", got, err)
	}
	notUTF8 := []byte(`{"at":"` + now.Format(time.RFC3339Nano) + "\",\"text\":\"a\xffb\"}")
	if got, err := ParseNotice(notUTF8, now); got != "a\uFFFDb" || err != nil {
		t.Errorf("ParseNotice(invalid UTF-8) = %q, %v; want it replaced", got, err)
	}
	bad := map[string][]byte{
		"empty":      nil,
		"no text":    enc(now, ""),
		"no time":    []byte(`{"text":"why"}`),
		"future":     enc(now.Add(time.Hour), "why"),
		"stale":      enc(now.Add(-time.Hour), "why"),
		"too long":   enc(now, strings.Repeat("x", noticeMaxText+1)),
		"extra":      []byte(`{"at":"` + now.Format(time.RFC3339Nano) + `","text":"why","cmd":"rm"}`),
		"two values": append(enc(now, "why"), enc(now, "again")...),
		"not json":   []byte("why"),
	}
	for name, b := range bad {
		if got, err := ParseNotice(b, now); err == nil {
			t.Errorf("%s: accepted as %q", name, got)
		}
	}
}

// FuzzParseNotice: any bytes from a notice file are refused or give a text
// within the bounds ParseNotice promises, never a panic.
func FuzzParseNotice(f *testing.F) {
	now := time.Date(2026, 12, 4, 18, 0, 0, 0, time.UTC)
	good, _ := json.Marshal(notice{At: now, Text: "tfgpu-kernel: the previous kernel stopped\n"})
	f.Add(good)
	f.Add([]byte(`{"at":"2026-12-04T18:00:00Z","text":"\u001b[31mred\u0007"}`))
	f.Add([]byte(`{"at":"2026-12-04T18:00:00Z","text":""}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		text, err := ParseNotice(b, now)
		if err != nil {
			return
		}
		if text == "" || len(text) > noticeMaxText {
			t.Fatalf("accepted %q as %d bytes of text", b, len(text))
		}
		for _, r := range text {
			if r != '\n' && (r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0)) {
				t.Fatalf("accepted %q with control character %U in its text", b, r)
			}
		}
	})
}
