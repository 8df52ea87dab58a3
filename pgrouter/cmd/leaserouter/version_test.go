package main

import (
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter/internal/contract"
)

// TestVersionPrintsTheModuleVersion: version, --version and -version print
// the version the go command recorded for the binary's module, with exit
// status 0 and no database needed; a binary installed with go install
// …@v0.1.0 says v0.1.0; one built from a checkout ("(devel)", or a
// pseudo-version stamped from the commit) also names the release its
// modules are at.
func TestVersionPrintsTheModuleVersion(t *testing.T) {
	tail := " " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + "\n"
	for _, c := range []struct {
		info *debug.BuildInfo
		ok   bool
		want string
	}{
		{&debug.BuildInfo{Main: debug.Module{Path: "github.com/leaserouter/leaserouter/pgrouter", Version: contract.Version}}, true, contract.Version},
		{&debug.BuildInfo{Main: debug.Module{Path: "github.com/leaserouter/leaserouter/pgrouter", Version: "(devel)"}}, true, "(devel) (modules at " + contract.Version + ")"},
		{&debug.BuildInfo{Main: debug.Module{Path: "github.com/leaserouter/leaserouter/pgrouter", Version: "v0.0.0-20261129040136-3c5ec7b162a1+dirty"}}, true, "v0.0.0-20261129040136-3c5ec7b162a1+dirty (modules at " + contract.Version + ")"},
		{&debug.BuildInfo{}, true, "unknown (modules at " + contract.Version + ")"},
		{nil, false, "unknown (modules at " + contract.Version + ")"},
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
