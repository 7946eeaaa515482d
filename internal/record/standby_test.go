package record

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tfgpu/tfgpu-kernel/internal/proc"
	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

const spareTestID = "5b2c1e7a-aaaa-4bbb-8ccc-000000000001"

// A spare record names processes only while they are what it says: alive,
// with the recorded start times, the directory owner's; a record of
// another kernel, with unknown fields or over its bounds is refused; a
// reason (off) names no process at all.
func TestReadSpare(t *testing.T) {
	d, err := OpenDir(filepath.Join(t.TempDir(), "state"), true, false)
	testutil.NoErr(t, err)
	defer d.Close()
	self := os.Getpid()
	start, err := proc.StartTime(self)
	testutil.NoErr(t, err)
	live := Spare{KernelID: spareTestID, StandbyPID: self, StandbyStart: start, PID: self, Start: start, Ready: time.Now()}
	for _, tc := range []struct {
		name string
		sp   Spare
		raw  string
		want bool // ReadSpare names it
	}{
		{"live", live, "", true},
		{"a reused pid", func() Spare { s := live; s.Start++; return s }(), "", false},
		{"another kernel's", func() Spare { s := live; s.KernelID = "other"; return s }(), "", false},
		{"a reason", Spare{KernelID: spareTestID, GPU: true, Off: "a spare held a GPU context"}, "", true},
		{"a long reason", Spare{KernelID: spareTestID, Off: strings.Repeat("x", spareMaxOff+1)}, "", false},
		{"an unknown field", Spare{}, `{"kernel_id":"` + spareTestID + `","pid":1,"cmd":"rm -rf /"}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw := []byte(tc.raw)
			if tc.raw == "" {
				raw, _ = json.Marshal(tc.sp)
			}
			if err := d.write(SpareName(spareTestID), raw); err != nil {
				t.Fatal(err)
			}
			got := d.ReadSpare(spareTestID)
			switch {
			case (got != nil) != tc.want:
				t.Fatalf("ReadSpare = %+v, want named %v", got, tc.want)
			case got != nil && got.Off != "" && (got.PID != 0 || got.StandbyPID != 0):
				t.Fatalf("a reason names processes: %+v", got)
			}
		})
	}
}

// FuzzParseSpare: any bytes from a spare record are refused or give a
// record of the kernel asked for, within its bounds, never a panic.
func FuzzParseSpare(f *testing.F) {
	good, _ := json.Marshal(Spare{KernelID: spareTestID, StandbyPID: 10, StandbyStart: 5, PID: 11, Start: 6, Preload: []string{"numpy"}})
	f.Add(good)
	f.Add([]byte(`{"kernel_id":"` + spareTestID + `","gpu":true,"off":"\u001b[31mred"}`))
	f.Add([]byte(`{"kernel_id":"` + spareTestID + `"}{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		sp, err := ParseSpare(b, spareTestID)
		if err != nil {
			if !errors.Is(err, ErrRefused) {
				t.Fatalf("refused %q without ErrRefused: %v", b, err)
			}
			return
		}
		if sp.KernelID != spareTestID || len(sp.Off) > spareMaxOff || len(sp.Preload) > spareMaxPreload || (sp.GPU && sp.Off == "") {
			t.Fatalf("accepted %q as %+v", b, sp)
		}
	})
}
