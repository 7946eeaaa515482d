// Command wheelspec writes the wheel's kernelspec directory: the build
// backend (python/backend/tfgpu_build.py) runs it on the build machine as
//
//	go run ./internal/wheelspec DIR VERSION
//
// so kernel.json comes from the kernelspec package, as every other
// kernelspec of ours does, whatever architecture the wheel is for.
package main

import (
	"fmt"
	"os"

	"github.com/tfgpu/tfgpu-kernel/kernelspec"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: wheelspec DIR VERSION")
		os.Exit(2)
	}
	if err := kernelspec.WriteLauncherSpec(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "wheelspec:", err)
		os.Exit(1)
	}
}
