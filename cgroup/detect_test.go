package cgroup

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/tfgpu/tfgpu-kernel/internal/testutil"
)

// Fixtures in testdata/layout: NAME.mountinfo and NAME.cgroup are
// /proc/self/mountinfo and /proc/self/cgroup of a process on such a host
// ("hybrid" is the test machine's).
func TestParseLayout(t *testing.T) {
	tests := []struct {
		name     string
		kind     string
		v2Mount  string
		v2Self   string
		v1Memory string // mount point of the v1 memory controller
		v1Count  int
		readOnly []string // mount points mounted read-only
	}{
		{name: "v2", kind: LayoutV2, v2Mount: "/sys/fs/cgroup",
			v2Self: "/sys/fs/cgroup/user.slice/user-1000.slice/session-3.scope"},
		{name: "hybrid", kind: LayoutHybrid, v2Mount: "/sys/fs/cgroup/unified",
			v2Self: "/sys/fs/cgroup/unified", v1Memory: "/sys/fs/cgroup/memory", v1Count: 8},
		{name: "hybrid-systemd", kind: LayoutHybrid, v2Mount: "/sys/fs/cgroup/unified",
			v2Self:   "/sys/fs/cgroup/unified/user.slice/user-1000.slice/session-2.scope",
			v1Memory: "/sys/fs/cgroup/memory", v1Count: 1},
		{name: "v1", kind: LayoutV1, v1Memory: "/sys/fs/cgroup/memory", v1Count: 5},
		{name: "v2-container", kind: LayoutV2, v2Mount: "/sys/fs/cgroup",
			v2Self: "/sys/fs/cgroup/kernel", readOnly: []string{"/sys/fs/cgroup"}}, // docker's default
		{name: "v2-outside", kind: LayoutV2, v2Mount: "/sys/fs/cgroup", readOnly: []string{"/sys/fs/cgroup"}}, // own cgroup not under the mount
		{name: "none", kind: LayoutNone},
		// podman on a hybrid host (#24): each v1 hierarchy bound read-only
		// at the container's cgroup, no cgroup2 mount.
		{name: "v1-container-ro", kind: LayoutV1, v1Memory: "/sys/fs/cgroup/memory", v1Count: 5,
			readOnly: []string{"/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/freezer", "/sys/fs/cgroup/memory", "/sys/fs/cgroup/pids"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mi := readFixture(t, tc.name+".mountinfo")
			cg := readFixture(t, tc.name+".cgroup")
			l, err := ParseLayout(mi, cg)
			testutil.NoErr(t, err)
			if l.Kind != tc.kind || l.V2Mount != tc.v2Mount || l.V2Self != tc.v2Self {
				t.Errorf("ParseLayout = kind %q v2 %q self %q; want %q %q %q",
					l.Kind, l.V2Mount, l.V2Self, tc.kind, tc.v2Mount, tc.v2Self)
			}
			if l.V1["memory"] != tc.v1Memory || len(l.V1) != tc.v1Count {
				t.Errorf("V1 = %v (%d controllers); want memory at %q, %d controllers",
					l.V1, len(l.V1), tc.v1Memory, tc.v1Count)
			}
			if !slices.Equal(l.ReadOnly, tc.readOnly) {
				t.Errorf("ReadOnly = %q; want %q", l.ReadOnly, tc.readOnly)
			}
			if slices.Contains(slices.Collect(maps.Keys(l.V1)), "name=systemd") {
				t.Errorf("V1 counts name=systemd as a controller: %v", l.V1)
			}
		})
	}
}

func TestParseLayoutErrors(t *testing.T) {
	tests := []struct {
		name       string
		mountinfo  string
		selfCgroup string
	}{
		{name: "no separator", mountinfo: "30 22 0:26 / /sys/fs/cgroup rw cgroup2 cgroup2 rw\n"},
		{name: "short line", mountinfo: "30 22 0:26 /\n"},
		{name: "relative v2 path",
			mountinfo:  "30 22 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
			selfCgroup: "0::user.slice\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if l, err := ParseLayout([]byte(tc.mountinfo), []byte(tc.selfCgroup)); err == nil {
				t.Errorf("ParseLayout = %+v, want an error", l)
			}
		})
	}
}

func TestUnescapeMount(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{name: "plain", in: "/sys/fs/cgroup", want: "/sys/fs/cgroup"},
		{name: "space", in: `/mnt/with\040space`, want: "/mnt/with space"},
		{name: "backslash", in: `/a\134b`, want: `/a\b`},
		{name: "not octal", in: `/a\xyz`, want: `/a\xyz`},
		{name: "trailing", in: `/a\04`, want: `/a\04`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := unescapeMount(tc.in); got != tc.want {
				t.Errorf("unescapeMount(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

// TestParseDeleted: a process whose cgroup was removed under it.
func TestParseDeleted(t *testing.T) {
	l, err := ParseLayout([]byte("30 22 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"),
		[]byte("0::/gone (deleted)\n"))
	if err != nil || l.V2Self != "/sys/fs/cgroup/gone" {
		t.Errorf("ParseLayout = %+v, %v; want self /sys/fs/cgroup/gone", l, err)
	}
}

func readFixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "layout", name))
	testutil.NoErr(t, err)
	return b
}
