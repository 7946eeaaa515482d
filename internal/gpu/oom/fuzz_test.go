package oom

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// Match never panics, whatever a kernel sends, and answers the same for a
// traceback split into entries at line breaks or not.
func FuzzMatch(f *testing.F) {
	for _, c := range matches {
		f.Add(c.ename, c.evalue, strings.Join(c.tb, "\n"))
	}
	f.Add("X", "\x1b]8;;", "\x1b[\x1b]\x1b")
	f.Fuzz(func(t *testing.T, ename, evalue, tb string) {
		if len(evalue)+len(tb) >= Budget { // past it, entries and one string are cut differently
			return
		}
		a, aok := Match(ename, evalue, []string{tb})
		b, bok := Match(ename, evalue, strings.Split(tb, "\n"))
		if a != b || aok != bok {
			t.Errorf("one entry: %q, %v; split at line breaks: %q, %v", a, aok, b, bok)
		}
	})
}

// clean's output is one line of at most max runes, with no control
// characters or bidirectional overrides.
func FuzzClean(f *testing.F) {
	f.Add("train.ipynb", 60)
	f.Add("a\nGPU0 fake\x1b[31m", 10)
	f.Add("mallory\u202e", 8)
	f.Fuzz(func(t *testing.T, s string, max int) {
		if max < 4 || max > 1000 {
			return
		}
		got := clean(s, max)
		if n := utf8.RuneCountInString(got); n > max {
			t.Errorf("clean(%q, %d) = %q: %d runes", s, max, got, n)
		}
		for _, r := range got {
			if unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) || r == '\u2028' || r == '\u2029' {
				t.Errorf("clean(%q, %d) = %q: has %U", s, max, got, r)
			}
		}
	})
}
