package cgroup

import (
	"bufio"
	"bytes"
	"fmt"
	"maps"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
)

// Cgroup layouts of a host, as Layout.Kind reports them (the names systemd
// uses: "unified", "hybrid", "legacy").
const (
	LayoutV2     = "v2"     // cgroup2 only (usually at /sys/fs/cgroup)
	LayoutHybrid = "hybrid" // cgroup2 (usually at /sys/fs/cgroup/unified) and v1 controllers
	LayoutV1     = "v1"     // v1 hierarchies only
	LayoutNone   = "none"   // no cgroup file system mounted
)

// v1Controllers are the controllers a v1 mount can carry, as they appear in
// its super options (cgroups(7)). Other options (rw, name=systemd,
// clone_children, release_agent=...) are not controllers.
var v1Controllers = []string{"blkio", "cpu", "cpuacct", "cpuset", "devices", "freezer",
	"hugetlb", "memory", "misc", "net_cls", "net_prio", "perf_event", "pids", "rdma"}

// Layout is what DetectLayout found about the host's cgroups and this
// process's place in them.
type Layout struct {
	Kind string // LayoutV2, LayoutHybrid, LayoutV1 or LayoutNone
	// V2Mount is where the cgroup2 hierarchy is mounted ("" if it is not).
	V2Mount string
	// V2Self is the directory of this process's own v2 cgroup: V2Mount
	// joined with the "0::" path of /proc/self/cgroup, relative to the
	// mount's root. "" when there is no v2 tree or the cgroup is not
	// visible under the mount (the mount shows another part of the tree).
	V2Self string
	// V1 maps each mounted v1 controller to its mount point.
	V1 map[string]string
	// ReadOnly are the mount points of V2Mount and V1 that are mounted
	// read-only (a container's default): no cgroup can be made there.
	ReadOnly []string
}

// DetectLayout reads /proc/self/mountinfo and /proc/self/cgroup.
func DetectLayout() (Layout, error) {
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return Layout{}, fmt.Errorf("detect cgroup layout: %w", err)
	}
	cg, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return Layout{}, fmt.Errorf("detect cgroup layout: %w", err)
	}
	return ParseLayout(mi, cg)
}

// ParseLayout decides the layout from the contents of /proc/self/mountinfo
// and /proc/self/cgroup (proc(5), cgroups(7)). It is pure, for table tests.
func ParseLayout(mountinfo, selfCgroup []byte) (Layout, error) {
	l := Layout{V1: map[string]string{}}
	var v2Root string
	ro := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(mountinfo))
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		m, ok, err := parseMountLine(sc.Text())
		if err != nil {
			return Layout{}, err
		}
		if !ok {
			continue
		}
		if m.fstype == "cgroup2" || m.fstype == "cgroup" {
			ro[m.point] = slices.Contains(strings.Split(m.opts, ","), "ro") // a later mount on the same point hides the first
		}
		switch m.fstype {
		case "cgroup2":
			// Several cgroup2 mounts show the same hierarchy; prefer the
			// standard places, then the first one.
			if l.V2Mount == "" || v2Rank(m.point) < v2Rank(l.V2Mount) {
				l.V2Mount, v2Root = m.point, m.root
			}
		case "cgroup":
			for _, o := range strings.Split(m.superOpts, ",") {
				if _, seen := l.V1[o]; slices.Contains(v1Controllers, o) && !seen {
					l.V1[o] = m.point
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		return Layout{}, fmt.Errorf("parse mountinfo: %w", err)
	}
	for _, p := range append([]string{l.V2Mount}, slices.Sorted(maps.Values(l.V1))...) {
		if p != "" && ro[p] && !slices.Contains(l.ReadOnly, p) {
			l.ReadOnly = append(l.ReadOnly, p)
		}
	}
	switch {
	case l.V2Mount != "" && len(l.V1) > 0:
		l.Kind = LayoutHybrid
	case l.V2Mount != "":
		l.Kind = LayoutV2
	case len(l.V1) > 0:
		l.Kind = LayoutV1
	default:
		l.Kind = LayoutNone
	}
	if l.V2Mount == "" {
		return l, nil
	}
	self, ok, err := parseSelfV2(selfCgroup)
	if err != nil || !ok {
		return l, err
	}
	// The mount shows the hierarchy from v2Root down (a bind mount of a
	// subtree, or a container without a cgroup namespace); /proc/self/cgroup
	// paths are from the hierarchy's root (or the namespace's).
	if rel, ok := cutPathPrefix(self, v2Root); ok {
		l.V2Self = path.Join(l.V2Mount, rel)
	}
	return l, nil
}

func v2Rank(point string) int {
	switch point {
	case "/sys/fs/cgroup":
		return 0
	case "/sys/fs/cgroup/unified":
		return 1
	}
	return 2
}

type mount struct{ root, point, opts, fstype, superOpts string }

// parseMountLine parses one mountinfo line:
//
//	36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
//
// fields 4 and 5 are root and mount point; after the optional fields and "-"
// come fstype, source and super options. ok is false for a blank line.
func parseMountLine(line string) (m mount, ok bool, err error) {
	f := strings.Fields(line)
	if len(f) == 0 {
		return m, false, nil
	}
	sep := slices.Index(f, "-")
	if sep < 6 || len(f) < sep+4 {
		return m, false, fmt.Errorf("parse mountinfo line %q: malformed", line)
	}
	m.root, m.point, m.opts = unescapeMount(f[3]), unescapeMount(f[4]), f[5]
	m.fstype, m.superOpts = f[sep+1], f[sep+3]
	return m, true, nil
}

// unescapeMount undoes the kernel's octal escapes of space, tab, newline and
// backslash in mountinfo paths ("\040").
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// parseSelfV2 returns the path of the "0::PATH" line of /proc/self/cgroup;
// ok is false when there is none (a v1-only host).
func parseSelfV2(b []byte) (string, bool, error) {
	for _, line := range strings.Split(string(b), "\n") {
		if p, found := strings.CutPrefix(line, "0::"); found {
			// A cgroup removed while we are in it reads "/x (deleted)".
			p = strings.TrimSuffix(p, " (deleted)")
			if !strings.HasPrefix(p, "/") {
				return "", false, fmt.Errorf("parse /proc/self/cgroup: v2 path %q is not absolute", p)
			}
			return p, true, nil
		}
	}
	return "", false, nil
}

// cutPathPrefix returns p relative to root when p is root or below it.
func cutPathPrefix(p, root string) (string, bool) {
	if root == "/" {
		return p, true
	}
	if p == root {
		return "/", true
	}
	rel, ok := strings.CutPrefix(p, root+"/")
	return "/" + rel, ok
}
