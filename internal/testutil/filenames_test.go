package testutil

import (
	"bufio"
	"go/build/constraint"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestFileNamesSayTheSuite: a test file's name says which suite runs it
// (docs/testing.md): e2e_*_test.go is the full suite's, so it carries the
// e2e build tag, and a file with the e2e tag is named e2e_*_test.go. A
// quick test named e2e_ looks skipped by `go test ./...`, and an e2e one
// named otherwise looks run by it.
func TestFileNamesSayTheSuite(t *testing.T) {
	root := moduleRoot(t)
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != root && (n == "testdata" || n == "node_modules" || strings.HasPrefix(n, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		named, tagged := strings.HasPrefix(d.Name(), "e2e_"), needsE2ETag(t, path)
		rel, _ := filepath.Rel(root, path)
		switch {
		case named && !tagged:
			t.Errorf("%s: named e2e_ but has no e2e build tag: a quick test, name it for what it tests", rel)
		case tagged && !named:
			t.Errorf("%s: has the e2e build tag but is not named e2e_*_test.go", rel)
		}
		return nil
	})
	NoErr(t, err)
}

// needsE2ETag reports whether the file's //go:build line keeps it out of
// a build without -tags e2e and lets it into one with it, on this platform.
func needsE2ETag(t *testing.T, path string) bool {
	f, err := os.Open(path)
	NoErr(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "package ") {
			return false // constraints come before the package clause
		}
		if !constraint.IsGoBuild(line) {
			continue
		}
		expr, err := constraint.Parse(line)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		with := func(e2e bool) bool {
			return expr.Eval(func(tag string) bool {
				return tag == "e2e" && e2e || tag == runtime.GOOS || tag == runtime.GOARCH || tag == "unix"
			})
		}
		return with(true) && !with(false)
	}
	return false
}

// moduleRoot is the directory of go.mod above the test's directory.
func moduleRoot(t *testing.T) string {
	dir, err := os.Getwd()
	NoErr(t, err)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		up := filepath.Dir(dir)
		if up == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = up
	}
}
