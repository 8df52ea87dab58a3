package gosource

import (
	"flag"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDirIsTheStandardLibrary(t *testing.T) {
	src, err := Dir()
	require.NoError(t, err)
	require.FileExists(t, filepath.Join(src, "runtime", "proc.go"))
}

func TestRootIsTheOneArgument(t *testing.T) {
	parse := func(args ...string) *flag.FlagSet {
		fl := flag.NewFlagSet("test", flag.ContinueOnError)
		require.NoError(t, fl.Parse(args))
		return fl
	}
	root, err := Root(parse("some/dir"))
	require.NoError(t, err)
	require.Equal(t, "some/dir", root)

	root, err = Root(parse())
	require.NoError(t, err)
	require.FileExists(t, filepath.Join(root, "runtime", "proc.go"))

	_, err = Root(parse("a", "b"))
	require.EqualError(t, err, "at most one directory, got 2 arguments")
}
