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
	for _, file := range []string{"examples/quickstart/main.go", "pgrouter/examples/quickstart/main.go"} {
		src, err := os.ReadFile(filepath.FromSlash(file))
		require.NoError(t, err)
		i := strings.Index(string(src), "func main() {\n")
		require.GreaterOrEqual(t, i, 0, "%s has no func main", file)
		// The block shown is the first go block after the README's link
		// to the program.
		link := strings.Index(string(readme), "]("+file+")")
		require.GreaterOrEqual(t, link, 0, "README.md links to %s", file)
		blocks := goBlocks(string(readme[link:]))
		require.NotEmpty(t, blocks, "README.md shows %s after its link", file)
		require.Equal(t, string(src[i:]), blocks[0], "README.md's Quick start shows %s from func main on, as it is", file)
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
