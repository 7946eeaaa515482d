package record

import (
	"os"
	"testing"
)

// Where an unprivileged supervisor keeps its records, by what its
// environment holds. "gateway": a kernel Jupyter Enterprise Gateway
// launched has no HOME and no XDG_RUNTIME_DIR (the gateway passes only
// KERNEL_* and its inherited_envs), and before the user database was asked
// the supervisor refused to start there ("no state directory", exit 2).
func TestDefaultDirByEnvironment(t *testing.T) {
	host, err := os.Hostname()
	if err != nil || !validName(host) {
		host = "localhost"
	}
	notMine := t.TempDir() // the test's, not uid 4321's
	tests := []struct {
		name    string
		euid    int
		env     map[string]string
		home    string // the user database's
		want    string
		askedDB bool
	}{
		{name: "setting", euid: 4321, env: map[string]string{"TFGPU_STATE_DIR": "/srv/state", "HOME": "/home/a"}, want: "/srv/state"},
		{name: "root", euid: 0, env: map[string]string{"HOME": "/root"}, want: "/run/tfgpu-kernel"},
		{name: "home", euid: 4321, env: map[string]string{"HOME": "/home/a"}, home: "/home/db", want: "/home/a/.local/state/tfgpu-kernel/" + host},
		{name: "xdg state home", euid: 4321, env: map[string]string{"XDG_STATE_HOME": "/s", "HOME": "/home/a"}, want: "/s/tfgpu-kernel/" + host},
		{name: "runtime dir not the user's", euid: 4321, env: map[string]string{"XDG_RUNTIME_DIR": notMine, "HOME": "/home/a"}, want: "/home/a/.local/state/tfgpu-kernel/" + host},
		{name: "gateway", euid: 4321, env: map[string]string{"KERNEL_ID": "k"}, home: "/home/eg", want: "/home/eg/.local/state/tfgpu-kernel/" + host, askedDB: true},
		{name: "no home anywhere", euid: 4321, env: map[string]string{}, want: "", askedDB: true},
		{name: "relative HOME", euid: 4321, env: map[string]string{"HOME": "home"}, home: "/home/db", want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			asked := false
			got := defaultDir(tt.euid, func(k string) string { return tt.env[k] },
				func() string { asked = true; return tt.home })
			if got != tt.want {
				t.Errorf("defaultDir = %q, want %q", got, tt.want)
			}
			if asked != tt.askedDB {
				t.Errorf("user database asked: %v, want %v", asked, tt.askedDB)
			}
		})
	}
}
