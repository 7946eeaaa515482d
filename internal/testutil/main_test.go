package testutil

import "testing"

// The package's own tests run as every package's do (docs/testing.md#hermetic):
// TestCleanEnvKeepsOnlyTheTests checks what Hermetic leaves, and
// TestQuickTestsOnAPlantedHost needs its namespace to plant a host in.
func TestMain(m *testing.M) { MainHermetic(m) }
