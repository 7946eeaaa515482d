//go:build !e2e

package main

// e2eStacks: the quick suite (go test ./...) runs the end-to-end tests it
// has on Debian's stack only, which install.sh puts on the machine: no
// venv to build from PyPI (docs/testing.md#running).
var e2eStacks = []string{stackDebian}

// fullSuite: whether this is the quick suite (tests that run more cases there
// say which).
const fullSuite = false

// identitySpareModes: the quick suite walks a kernel through its states
// (TestKernelIdentityAcrossStates) with the spare kernel on, the default.
var identitySpareModes = []bool{true}
