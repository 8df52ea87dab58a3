package main

import (
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestVersionPrintsTheModuleVersion: version, --version and -version print
// the version the go command recorded for the binary's module, with exit
// status 0 and no database needed; a binary installed with go install
// …@v0.1.0 says v0.1.0, one built from a checkout "(devel)".
func TestVersionPrintsTheModuleVersion(t *testing.T) {
	tail := " " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + "\n"
	for _, c := range []struct {
		info *debug.BuildInfo
		ok   bool
		want string
	}{
		{&debug.BuildInfo{Main: debug.Module{Path: "github.com/leaserouter/leaserouter/pgrouter", Version: "v0.1.0"}}, true, "v0.1.0"},
		{&debug.BuildInfo{Main: debug.Module{Path: "github.com/leaserouter/leaserouter/pgrouter", Version: "(devel)"}}, true, "(devel)"},
		{&debug.BuildInfo{}, true, "unknown"},
		{nil, false, "unknown"},
	} {
		require.Equal(t, "leaserouter "+c.want+tail, version(c.info, c.ok))
	}

	info, ok := debug.ReadBuildInfo()
	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}} {
		res := cli(t, "", args...)
		require.Equal(t, exitOK, res.code, "%q: %s", args, res.stderr)
		require.Empty(t, res.stderr, "%q", args)
		require.Equal(t, version(info, ok), res.stdout, "%q", args)
	}
	require.Contains(t, cli(t, "", "help").stdout, "'leaserouter version'")
}
