package bytesize

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Parse parses a memory size such as a --memory-limit value: a
// non-negative number, optionally with a fraction, and an optional unit.
//
// Units are powers of 1024 whichever way they are spelled, as for Docker's
// --memory and the cgroup files themselves: K, M, G, T, P and E (any case),
// each optionally followed by "i", "B" or "iB"; so "8G", "8GB", "8Gi" and
// "8GiB" all mean 8×1024³ bytes, and "512Mi" means 512×1024² bytes. A bare
// number, or one with the unit "B", is bytes. A fraction is allowed ("1.5G")
// and the result is rounded down to a whole byte. Spaces around the value
// and between number and unit are ignored. Errors are one line that names
// the bad value.
func Parse(s string) (int64, error) {
	bad := func(why string) (int64, error) {
		return 0, fmt.Errorf("bad memory size %q: %s", s, why)
	}
	v := strings.TrimSpace(s)
	i := 0
	for i < len(v) && (v[i] >= '0' && v[i] <= '9' || v[i] == '.') {
		i++
	}
	num, unit := v[:i], strings.TrimSpace(v[i:])
	if num == "" {
		return bad("want a number with an optional unit, such as 8G, 512Mi or 1.5G")
	}
	shift, ok := sizeUnit(unit)
	if !ok {
		return bad(fmt.Sprintf("unknown unit %q (want K, M, G, T, P or E, optionally followed by i, B or iB)", unit))
	}
	mult := int64(1) << shift
	if !strings.Contains(num, ".") {
		n, err := strconv.ParseInt(num, 10, 64)
		if err != nil || n > math.MaxInt64/mult {
			return bad("too large")
		}
		return n * mult, nil
	}
	if strings.Count(num, ".") > 1 || num == "." {
		return bad("malformed number")
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return bad("malformed number")
	}
	b := f * float64(mult)
	if b >= math.MaxInt64 { // float64(MaxInt64) is 2^63
		return bad("too large")
	}
	return int64(b), nil
}

// sizeUnit returns log2 of the unit's multiplier.
func sizeUnit(u string) (uint, bool) {
	u = strings.ToUpper(u)
	if u == "" || u == "B" {
		return 0, true
	}
	u = strings.TrimSuffix(u, "B")
	u = strings.TrimSuffix(u, "I")
	if len(u) != 1 {
		return 0, false
	}
	i := strings.Index("KMGTPE", u)
	if i < 0 {
		return 0, false
	}
	return 10 * uint(i+1), true
}

// Format writes n bytes the way Parse reads them back, in the
// largest binary unit that keeps at most one decimal ("300 MiB", "1.5 GiB",
// "1000 B"), for messages such as "killed at the memory limit of 300 MiB".
// The figure is rounded down, so it never overstates the size.
func Format(n int64) string {
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	units := []string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	u, div := 0, int64(1024)
	for u+1 < len(units) && n/div >= 1024 {
		u, div = u+1, div*1024
	}
	// Shifted by 10 first so that the product cannot overflow.
	whole, tenths := n/div, (n%div>>10)*10/(div>>10)
	if tenths == 0 {
		return fmt.Sprintf("%d %s", whole, units[u])
	}
	return fmt.Sprintf("%d.%d %s", whole, tenths, units[u])
}
