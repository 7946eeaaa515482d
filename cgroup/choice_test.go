package cgroup

import "testing"

// The proc mode has one name (#24): "proc" is taken and so is "none",
// its old name in kernelspecs already installed; both are the proc mode.
func TestChoiceHasOneNameForTheProcMode(t *testing.T) {
	for in, want := range map[string]string{"proc": ModeProc, "none": ModeProc, "auto": Auto, "v1": ModeV1, "v2": ModeV2, "systemd": ModeSystemd} {
		if got, ok := Choice(in); !ok || got != want {
			t.Errorf("Choice(%q) = %q, %v; want %q, true", in, got, ok, want)
		}
	}
	for _, bad := range []string{"", "None", "cgroup", "v3"} {
		if _, ok := Choice(bad); ok {
			t.Errorf("Choice(%q) taken", bad)
		}
	}
	for _, c := range Choices {
		if c == oldProcName {
			t.Errorf("Choices lists the old name %q: help and errors say proc", oldProcName)
		}
	}
}
