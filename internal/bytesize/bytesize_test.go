package bytesize

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	const (
		k = int64(1) << 10
		m = int64(1) << 20
		g = int64(1) << 30
	)
	good := []struct {
		in   string
		want int64
	}{
		{"1024", 1024},
		{"0", 0},
		{"100B", 100},
		{"8G", 8 * g},
		{"8g", 8 * g},
		{"8GB", 8 * g},
		{"8Gi", 8 * g},
		{"8GiB", 8 * g},
		{"8gib", 8 * g},
		{"300M", 300 * m},
		{"512Mi", 512 * m},
		{"1.5G", 3 * g / 2},
		{"0.5K", 512},
		{"1.0001K", 1024}, // rounded down
		{"64k", 64 * k},
		{"2T", 2 << 40},
		{"1P", 1 << 50},
		{" 8 G ", 8 * g},
		{"7E", 7 << 60},
		{"9223372036854775807", 1<<63 - 1},
	}
	for _, c := range good {
		got, err := Parse(c.in)
		if err != nil || got != c.want {
			t.Errorf("Parse(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
	bad := []string{"", "G", "-1G", "8X", "8GG", "8 G B", "1.2.3M", ".", "8E", "1e3",
		"9223372036854775808", "0x10", "8Gb extra", "+1G"}
	for _, in := range bad {
		got, err := Parse(in)
		if err == nil {
			t.Errorf("Parse(%q) = %d, want an error", in, got)
			continue
		}
		if msg := err.Error(); strings.Contains(msg, "\n") || !strings.Contains(msg, `"`+in+`"`) {
			t.Errorf("Parse(%q): error %q is not one line naming the value", in, msg)
		}
	}
}

func TestFormat(t *testing.T) {
	for _, c := range []struct {
		in   int64
		want string
	}{
		{0, "0 B"},
		{1000, "1000 B"},
		{1024, "1 KiB"},
		{300 << 20, "300 MiB"},
		{3 << 29, "1.5 GiB"},
		{8 << 30, "8 GiB"},
		{1<<30 - 1, "1023.9 MiB"},
		{1<<63 - 1, "7.9 EiB"},
	} {
		if got := Format(c.in); got != c.want {
			t.Errorf("Format(%d) = %q, want %q", c.in, got, c.want)
		}
		if c.in > 0 {
			back, err := Parse(strings.ReplaceAll(c.want, " ", ""))
			if err != nil || back > c.in {
				t.Errorf("Parse(Format(%d)) = %d, %v: want ≤ %d", c.in, back, err, c.in)
			}
		}
	}
}
