// Package gosource gives the example programs (examples/fileindex and
// pgrouter/examples/fleet) the tree they index: the one directory named on
// their command line, or the Go distribution's source.
package gosource

import (
	"flag"
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// Root returns the directory named by the one argument left on fl after
// its flags (fl must be parsed), or Dir when there is none; more than one
// argument is an error.
func Root(fl *flag.FlagSet) (string, error) {
	switch fl.NArg() {
	case 0:
		return Dir()
	case 1:
		return fl.Arg(0), nil
	}
	return "", fmt.Errorf("at most one directory, got %d arguments", fl.NArg())
}

// Dir returns the src folder of the Go distribution: runtime.GOROOT's, or
// `go env GOROOT`'s in a -trimpath build (where runtime.GOROOT is empty).
func Dir() (string, error) {
	root := runtime.GOROOT() //lint:ignore SA1019 asked for first; empty in -trimpath builds, hence the fallback
	if root == "" {
		out, err := exec.Command("go", "env", "GOROOT").Output()
		if err != nil {
			return "", fmt.Errorf("finding the Go source tree: go env GOROOT: %w", err)
		}
		root = strings.TrimSpace(string(out))
	}
	return filepath.Join(root, "src"), nil
}
