//go:build race

package cgroup

// raceEnabled: the race detector slows every process of a helper tree
// down several times, so timing figures mean nothing under it.
const raceEnabled = true
