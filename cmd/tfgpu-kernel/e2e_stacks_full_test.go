//go:build e2e

package main

// e2eStacks: the full suite (go test -tags e2e ./...) runs every
// stack-aware end-to-end test on both stacks (docs/testing.md#two-jupyter-stacks).
var e2eStacks = []string{stackDebian, stackCurrent}

// fullSuite: whether this is the full suite (tests that run more cases there
// say which).
const fullSuite = true

// identitySpareModes: the full suite walks a kernel through its states
// (TestKernelIdentityAcrossStates) with the spare kernel on and off.
var identitySpareModes = []bool{true, false}
