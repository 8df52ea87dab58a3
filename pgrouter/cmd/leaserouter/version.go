package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// version is the line "leaserouter version" prints: the version of the
// module the binary was built from, as the go command recorded it ("v0.1.0"
// after go install …@v0.1.0, "(devel)" when built from a checkout), and the
// Go toolchain and platform. info is what debug.ReadBuildInfo returned (nil
// when ok is false: a binary built without module support).
func version(info *debug.BuildInfo, ok bool) string {
	v := "unknown"
	if ok && info != nil && info.Main.Version != "" {
		v = info.Main.Version
	}
	return fmt.Sprintf("leaserouter %s %s %s/%s\n", v, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
