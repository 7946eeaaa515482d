package control

import (
	"fmt"
	"os/user"
	"slices"
	"strconv"
	"strings"

	"github.com/tfgpu/tfgpu-kernel/internal/record"
)

// Collect is record.Collect: the records in dir, those of the caller's
// running supervisors wherever they record, and for root every user's.
// only: the records in dir alone (a state directory named with
// --state-dir or TFGPU_STATE_DIR).
func Collect(dir string, allUsers, only bool) ([]record.State, []error, error) {
	if only {
		return record.ReadStates(dir)
	}
	return record.Collect(dir, allUsers)
}

// Pick is the kernels that arg (read by KernelNamed into uid and id)
// names among states, or every kernel with all, those keep keeps (nil:
// all of them); an error is the usage error to say. With all, none picked
// is no error.
func Pick(states []record.State, arg, id string, all bool, uid int, keep func(record.State) bool) ([]record.State, error) {
	chosen := Choose(states, id, all, uid)
	if all && keep != nil {
		chosen = slices.DeleteFunc(chosen, func(st record.State) bool { return !keep(st) })
	}
	switch {
	case len(chosen) == 0 && all:
		return nil, nil
	case len(chosen) == 0 && len(id) < MinIDPrefix:
		return nil, fmt.Errorf("no kernel %q; give the whole id or at least %d characters of it", arg, MinIDPrefix)
	case len(chosen) == 0:
		return nil, fmt.Errorf("no kernel %q%s", arg, OfUserText(uid))
	case len(chosen) > 1 && !all:
		return nil, fmt.Errorf("%s", ambiguous(arg, chosen))
	}
	return chosen, nil
}

// Choose is every kernel (all), else the kernel whose id is id,
// else those whose id starts with id when id has at least MinIDPrefix
// characters (a typo of one character must not stop a kernel); with uid
// >= 0, of that user's only. An exact id always wins: a record planted
// with the id "<yours>x" (ids are public, in the supervisor's command
// line) must not make a kernel's own id ambiguous. Two users' kernels of
// the same id are both chosen, and Pick refuses to act on either
// (ambiguous): the one meant is named USER:ID.
func Choose(states []record.State, id string, all bool, uid int) []record.State {
	states = OfUser(states, uid)
	if all {
		return states
	}
	var exact, prefixed []record.State
	for _, st := range states {
		switch {
		case st.KernelID == id:
			exact = append(exact, st)
		case len(id) >= MinIDPrefix && strings.HasPrefix(st.KernelID, id):
			prefixed = append(prefixed, st)
		}
	}
	if len(exact) > 0 {
		return exact
	}
	return prefixed
}

// OfUser is the kernels of states whose owner is uid (all when uid < 0).
func OfUser(states []record.State, uid int) []record.State {
	if uid < 0 {
		return states
	}
	return slices.DeleteFunc(slices.Clone(states), func(st record.State) bool { return st.Owner != uid })
}

// OfUserText is " of user NAME" for uid, "" for any user (uid < 0).
func OfUserText(uid int) string {
	if uid < 0 {
		return ""
	}
	return " of user " + record.UserName(uid)
}

// KernelNamed reads the kernel an operator named, ID or USER:ID, and
// --user: the uid to narrow to (-1: any) and the id (or prefix).
func KernelNamed(arg, userFlag string) (uid int, id string, err error) {
	uid, id, err = record.ParseKernelName(arg, lookupUser)
	if err != nil {
		return -1, "", fmt.Errorf("%q: %v", arg, err)
	}
	if userFlag == "" {
		return uid, id, nil
	}
	u, err := lookupUser(userFlag)
	switch {
	case err != nil:
		return -1, "", fmt.Errorf("--user %q: %v", userFlag, err)
	case uid >= 0 && uid != u:
		return -1, "", fmt.Errorf("--user %q and %q name two users", userFlag, arg)
	}
	return u, id, nil
}

// lookupUser is the uid of a login name, or of a uid given as digits.
func lookupUser(name string) (int, error) {
	if n, err := strconv.Atoi(name); err == nil && n >= 0 {
		return n, nil
	}
	u, err := user.Lookup(name)
	if err != nil {
		return -1, fmt.Errorf("no user %q", name)
	}
	return strconv.Atoi(u.Uid)
}

// ambiguous is the refusal of a name that matches several kernels, each
// named as USER:ID so that the one meant can be given.
func ambiguous(arg string, chosen []record.State) string {
	var names []string
	for _, st := range chosen {
		names = append(names, record.UserName(st.Owner)+":"+st.KernelID)
	}
	slices.Sort(names)
	return fmt.Sprintf("%q names %d kernels: %s; give USER:ID, or more of the id", arg, len(chosen), strings.Join(names, ", "))
}

// MinIDPrefix is the shortest prefix of a kernel id stop takes.
const MinIDPrefix = 4

// Label names a kernel in stop's and start's results as they take
// it, USER:ID, with its notebook: another user's kernel of the same id is
// never taken for it.
func Label(st record.State) string {
	label := record.UserName(st.Owner) + ":" + st.KernelID
	if st.Session != "" {
		label += " (" + record.Printable(st.Session) + ")"
	}
	return label
}
