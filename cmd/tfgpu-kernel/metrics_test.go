package main

import (
	"os"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// stop's selections are one of an id, --all, or --idle-for; anything else
// is a usage error (exit 2) that stops nothing.
func TestStopUsage(t *testing.T) {
	bin := buildInstallTestBinary(t)
	for _, args := range [][]string{
		{"stop"}, {"stop", "--holding-gpu"}, {"stop", "--idle-for", "1h", "abc"}, {"stop", "--idle-for", "1h", "--all"},
		{"stop", "--idle-for", "-5m"}, {"stop", "--idle-for", "soon"}, {"stop", "--all", "abc"},
	} {
		env := append(os.Environ(), "TFGPU_STATE_DIR="+t.TempDir())
		if r := runInstallBin(t, env, bin, args...); r.code != 2 || strings.Count(strings.TrimSpace(r.stderr), "\n") > 2 {
			t.Errorf("%v: exit %d, want 2 with a short error:\n%s", args, r.code, r.stderr)
		}
	}
}

// parseProm parses the text exposition format with Prometheus' own parser.
func parseProm(t *testing.T, text string) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("not the Prometheus text format: %v\n%s", err, text)
	}
	return fams
}

// promValue is the gauge of family name whose labels include want.
func promValue(fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		return m.GetGauge().GetValue(), true
	}
	return 0, false
}
