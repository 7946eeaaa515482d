//go:build !race

package cgroup

const raceEnabled = false
