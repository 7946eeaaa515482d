//go:build !linux

package testutil

import "testing"

func HostJupyterDirs() []string     { return nil }
func HostNVML() []string            { return nil }
func Hermetic(dirs, files []string) { CleanEnv() }

func RequireHermetic(t testing.TB) {
	t.Helper()
	RequireOrSkip(t, "needs Linux mount namespaces to hide the host's files")
}

type Host struct {
	Dirs map[string]string
	Env  []string
}

func (h Host) Run(t testing.TB, hide bool, args ...string) (string, error) {
	t.Helper()
	RequireHermetic(t)
	return "", nil
}

func (h Host) Exec(t testing.TB, hide bool, argv ...string) (string, error) {
	t.Helper()
	RequireHermetic(t)
	return "", nil
}
