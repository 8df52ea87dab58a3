package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/leaserouter/leaserouter/internal/contract"
)

// version is the line "leaserouter version" prints: the version of the
// module the binary was built from, as the go command recorded it ("v0.1.0"
// after go install …@v0.1.0; "(devel)", or a pseudo-version stamped from
// the checkout's commit, when built from a checkout), and the Go toolchain
// and platform. When that is not a release, the line also names the
// release the source's modules are at (contract.Version), so a bug report
// from a checkout still says which release it is near. info is what
// debug.ReadBuildInfo returned (nil when ok is false: a binary built
// without module support).
func version(info *debug.BuildInfo, ok bool) string {
	v := "unknown"
	if ok && info != nil && info.Main.Version != "" {
		v = info.Main.Version
	}
	if v != contract.Version {
		v += " (modules at " + contract.Version + ")"
	}
	return fmt.Sprintf("leaserouter %s %s %s/%s\n", v, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
