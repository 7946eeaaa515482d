package testutil

import "os"

// JupyterEnv are the environment variables that move where Jupyter and
// IPython look for kernelspecs, config and runtime files (jupyter_core's
// paths, IPython's profile directory): set in the shell of whoever runs
// go test, they would choose what a test's jupyter_client finds.
// Hermetic removes them; a test that wants one sets it (t.Setenv).
var JupyterEnv = []string{
	"JUPYTER_PATH", "JUPYTER_DATA_DIR", "JUPYTER_CONFIG_DIR", "JUPYTER_CONFIG_PATH", "JUPYTER_RUNTIME_DIR",
	"JUPYTER_PLATFORM_DIRS", "JUPYTER_PREFER_ENV_PATH", "JUPYTER_NO_CONFIG", "JUPYTER_ALLOW_INSECURE_WRITES",
	"XDG_DATA_HOME", "XDG_CONFIG_HOME", "IPYTHONDIR",
}

func clearJupyterEnv() {
	for _, k := range JupyterEnv {
		os.Unsetenv(k)
	}
}
