package main

import (
	"bytes"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// run refuses a TFGPU_ variable it would ignore, with one line naming it
// (install's line for --env, noSuchSetting), and takes every setting's and
// every name of internalEnv.
func TestCheckRunEnv(t *testing.T) {
	var settings, internal []string
	for _, f := range append(slices.Clone(kernelspecRunFlags), "state-dir") {
		settings = append(settings, envName(f)+"=x")
	}
	for k := range internalEnv {
		internal = append(internal, k+"=1")
	}
	for _, tc := range []struct {
		name    string
		environ []string
		bad     string // the name the line must start with; "": taken
	}{
		{name: "a typo", environ: []string{"HOME=/root", "TFGPU_MEMORY_LIMT=8G"}, bad: "TFGPU_MEMORY_LIMT"},
		{name: "empty, still a typo", environ: []string{"TFGPU_MEMORY_LIMT="}, bad: "TFGPU_MEMORY_LIMT"},
		{name: "the first of two", environ: []string{"TFGPU_MEMORY_LIMT=1", "TFGPU_GPU_MEM_LIMIT=8G"}, bad: "TFGPU_GPU_MEM_LIMIT"},
		{name: "beside good ones", environ: append(slices.Clone(settings), "TFGPU_CONFIRM_TIMOUT=5s"), bad: "TFGPU_CONFIRM_TIMOUT"},
		{name: "a name that would break the line", environ: []string{"TFGPU_MEMORY_LIMT\x1b[2J=1"}, bad: "TFGPU_MEMORY_LIMT?[2J"},
		{name: "every setting", environ: settings},
		{name: "every internal name", environ: internal},
		{name: "not ours", environ: []string{"TFGPU=1", "E2E_TFGPU_BIN=x", "tfgpu_memory_limt=1", "CUDA_VISIBLE_DEVICES=0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkRunEnv(tc.environ)
			switch {
			case tc.bad == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.bad == "":
				return
			case err == nil:
				t.Fatalf("%q taken; want %s refused", tc.environ, tc.bad)
			}
			line := err.Error()
			want := tc.bad + ": tfgpu-kernel run has no such setting (it reads TFGPU_CGROUP, TFGPU_MEMORY_LIMIT,"
			if !strings.HasPrefix(line, want) || strings.ContainsAny(line, "\n\r") {
				t.Fatalf("%q; want one line starting %q", line, want)
			}
		})
	}
}

// Every TFGPU_ name the repository uses (Go, Python, shell, the docs) is a
// setting of run's or in internalEnv, so that run never refuses what this
// program or its tests set for their own processes; but for the typos the
// tests and docs show on purpose. And every name of internalEnv is still
// used somewhere.
func TestEveryTFGPUNameIsKnown(t *testing.T) {
	typos := map[string]bool{"TFGPU_GPU_MEM_LIMIT": true, "TFGPU_MEMORY_LIMT": true, "TFGPU_CONFIRM_TIMOUT": true}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		t.Fatalf("git ls-files in %s: %v", root, err)
	}
	name := regexp.MustCompile(`(?:^|[^A-Za-z0-9_])(TFGPU_[A-Z0-9_]*[A-Z0-9])`)
	used := map[string][]string{} // name → files
	for _, f := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil || bytes.IndexByte(b, 0) >= 0 { // gone from the tree, or binary
			continue
		}
		for _, m := range name.FindAllSubmatch(b, -1) {
			used[string(m[1])] = append(used[string(m[1])], f)
		}
	}
	if len(used) < 10 {
		t.Fatalf("found only %d TFGPU_ names under %s: the scan is broken", len(used), root)
	}
	for _, k := range slices.Sorted(maps.Keys(used)) {
		_, setting := runFlagOfEnv(k)
		_, internal := internalEnv[k]
		switch {
		case setting && internal:
			t.Errorf("%s is a setting and in internalEnv", k)
		case !setting && !internal && !typos[k]:
			t.Errorf("%s (used in %s) is neither a setting of run's nor in internalEnv (envvars.go): run would refuse it", k, strings.Join(slices.Compact(used[k]), ", "))
		}
	}
	for k := range internalEnv {
		if files := slices.DeleteFunc(slices.Clone(used[k]), func(f string) bool { return f == "cmd/tfgpu-kernel/envvars.go" }); len(files) == 0 {
			t.Errorf("internalEnv's %s is used nowhere else: remove it", k)
		}
	}
}
