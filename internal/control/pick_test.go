package control

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/tfgpu/tfgpu-kernel/internal/record"
)

// An exact id always wins over ids it is a prefix of (a planted
// "<id>x"); a prefix that names two kernels names none; two users' kernels
// of one id are both chosen (the caller refuses them, ambiguous) unless a
// user is given.
func TestChooseKernels(t *testing.T) {
	sts := []record.State{{KernelID: "5b2c1e7a-1", Owner: 1000}, {KernelID: "5b2c1e7a-1x", Owner: 1000}, {KernelID: "9f00aa00-2", Owner: 1000},
		{KernelID: "5b2c1e7a-1", Owner: 1001}}
	ids := func(s []record.State) string {
		var out []string
		for _, st := range s {
			out = append(out, fmt.Sprintf("%d:%s", st.Owner, st.KernelID))
		}
		return strings.Join(out, " ")
	}
	for _, tc := range []struct {
		id   string
		all  bool
		uid  int
		want string
	}{
		{"5b2c1e7a-1", false, -1, "1000:5b2c1e7a-1 1001:5b2c1e7a-1"},
		{"5b2c1e7a-1", false, 1000, "1000:5b2c1e7a-1"},
		{"5b2c1e7a-1", false, 1001, "1001:5b2c1e7a-1"},
		{"5b2c1e7a-1x", false, -1, "1000:5b2c1e7a-1x"},
		{"5b2c1e7a-1x", false, 1001, ""},
		{"5b2c", false, 1000, "1000:5b2c1e7a-1 1000:5b2c1e7a-1x"},
		{"9f00", false, -1, "1000:9f00aa00-2"},
		{"9f0", false, -1, ""}, // a prefix of fewer than 4 characters names nothing
		{"5", false, -1, ""},
		{"nope", false, -1, ""},
		{"", true, -1, "1000:5b2c1e7a-1 1000:5b2c1e7a-1x 1000:9f00aa00-2 1001:5b2c1e7a-1"},
		{"", true, 1001, "1001:5b2c1e7a-1"},
	} {
		if got := ids(Choose(sts, tc.id, tc.all, tc.uid)); got != tc.want {
			t.Errorf("Choose(%q, %v, %d) = %q, want %q", tc.id, tc.all, tc.uid, got, tc.want)
		}
	}
	want := []string{record.UserName(1000) + ":5b2c1e7a-1", record.UserName(1001) + ":5b2c1e7a-1"}
	slices.Sort(want)
	if msg := ambiguous("5b2c1e7a-1", Choose(sts, "5b2c1e7a-1", false, -1)); !strings.Contains(msg, strings.Join(want, ", ")) {
		t.Errorf("the refusal of an ambiguous id does not name each kernel with its user: %s", msg)
	}
}

// A kernel is named ID or USER:ID (a login name or a uid), and --user says
// the same; two users named are refused.
func TestKernelNamed(t *testing.T) {
	for _, tc := range []struct {
		arg, user string
		uid       int
		id, err   string
	}{
		{"5b2c1e7a", "", -1, "5b2c1e7a", ""},
		{"0:5b2c1e7a", "", 0, "5b2c1e7a", ""},
		{"root:5b2c1e7a", "", 0, "5b2c1e7a", ""},
		{"5b2c1e7a", "root", 0, "5b2c1e7a", ""},
		{"root:5b2c1e7a", "0", 0, "5b2c1e7a", ""},
		{"root:5b2c1e7a", "1", -1, "", "name two users"},
		{"no-such-user-x:5b2c1e7a", "", -1, "", "no user"},
		{":5b2c1e7a", "", -1, "", "USER:ID"},
		{"", "no-such-user-x", -1, "", "no user"},
	} {
		uid, id, err := KernelNamed(tc.arg, tc.user)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("KernelNamed(%q, %q) = %v; want an error with %q", tc.arg, tc.user, err, tc.err)
			}
			continue
		}
		if err != nil || uid != tc.uid || id != tc.id {
			t.Errorf("KernelNamed(%q, %q) = %d, %q, %v; want %d, %q", tc.arg, tc.user, uid, id, err, tc.uid, tc.id)
		}
	}
}
