package leaserouter_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestReadmeQuickStartIsTheExamplePrograms: the README's Quick start shows
// the programs in examples/quickstart and pgrouter/examples/quickstart
// (each run by its own test) byte for byte — the first from its package
// clause, the second from func main — so the snippets users copy compile
// and run, and cannot drift from them.
func TestReadmeQuickStartIsTheExamplePrograms(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	blocks := goBlocks(string(readme))
	for _, c := range []struct{ file, from string }{
		{"examples/quickstart/main.go", "package main\n"},
		{"pgrouter/examples/quickstart/main.go", "func main() {\n"},
	} {
		src, err := os.ReadFile(filepath.FromSlash(c.file))
		require.NoError(t, err)
		i := strings.Index(string(src), c.from)
		require.GreaterOrEqual(t, i, 0, "%s has no %q", c.file, c.from)
		var shown []string
		for _, b := range blocks {
			if strings.HasPrefix(b, c.from) {
				shown = append(shown, b)
			}
		}
		require.Len(t, shown, 1, "README.md shows %s in one go block starting %q", c.file, c.from)
		require.Equal(t, string(src[i:]), shown[0], "README.md's Quick start shows %s from %q on, as it is", c.file, c.from)
	}
}

// goBlocks are the bodies of the ```go blocks of a Markdown text.
func goBlocks(md string) []string {
	var blocks []string
	for _, part := range strings.Split(md, "\n```go\n")[1:] {
		if end := strings.Index(part, "\n```\n"); end >= 0 {
			blocks = append(blocks, part[:end+1])
		}
	}
	return blocks
}
