package pgrouter

import (
	"io/fs"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestEveryObjectNameCarriesTheSchemaMarker: in every file of sql/ and
// migrations/, outside comments, each name of a table, sequence, type,
// function or statistics object that a migration creates, and each index
// a statement drops, is written after schemaMarker (so that qualify
// puts the schema there), but a trigger's name, which SQL never
// qualifies.
func TestEveryObjectNameCarriesTheSchemaMarker(t *testing.T) {
	texts := map[string]string{}
	for _, dir := range []fs.FS{statementFiles, migrationFiles} {
		require.NoError(t, fs.WalkDir(dir, ".", func(path string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				b, err := fs.ReadFile(dir, path)
				texts[path] = string(b)
				return err
			}
			return err
		}))
	}
	require.Greater(t, len(texts), 90)
	created := regexp.MustCompile(`CREATE (?:OR REPLACE )?(?:TABLE|SEQUENCE|TYPE|FUNCTION|STATISTICS) (?:IF NOT EXISTS )?(/\*schema\*/)?(leaserouter_\w+)`)
	names := map[string]bool{}
	for path, text := range texts {
		for _, m := range created.FindAllStringSubmatch(code(text), -1) {
			require.NotEmpty(t, m[1], "%s: %s created without the schema marker", path, m[2])
			names[m[2]] = true
		}
	}
	require.Contains(t, names, "leaserouter_jobs")
	require.Contains(t, names, "leaserouter_lease_valid")
	name := regexp.MustCompile(`(?:/\*schema\*/|CREATE TRIGGER |DROP TRIGGER IF EXISTS |tgname = ')?\b(leaserouter_\w+)\b`)
	droppedIndex := regexp.MustCompile(`DROP INDEX (?:CONCURRENTLY )?(?:IF EXISTS )?leaserouter_`)
	for path, text := range texts {
		c := code(text)
		require.NotRegexp(t, droppedIndex, c, "%s: an index dropped without the schema marker", path)
		for _, m := range name.FindAllStringSubmatch(c, -1) {
			if names[m[1]] && !strings.HasPrefix(m[0], schemaMarker) && !strings.Contains(m[0], "TRIGGER") && !strings.HasPrefix(m[0], "tgname") {
				t.Errorf("%s: %s without the schema marker", path, m[1])
			}
		}
	}
}

// code is text without its comments ("--" to the end of a line, outside
// a string literal).
func code(text string) string {
	var b strings.Builder
	for l := range strings.Lines(text) {
		quoted := false
		for i := 0; i < len(l); i++ {
			if l[i] == '\'' {
				quoted = !quoted
			}
			if !quoted && strings.HasPrefix(l[i:], "--") {
				l = l[:i] + "\n"
				break
			}
		}
		b.WriteString(l)
	}
	return b.String()
}

// TestSchemaChannelFitsAName: a schema's channel is "leaserouter:" and
// its name while that fits PostgreSQL's 63 bytes of a name (NOTIFY
// refuses a longer one), else a hash of the name; two schemas never
// share one.
func TestSchemaChannelFitsAName(t *testing.T) {
	require.Equal(t, "leaserouter", schemaChannel(""))
	require.Equal(t, "leaserouter:jobs", schemaChannel("jobs"))
	long, other := strings.Repeat("s", 63), strings.Repeat("s", 62)+"t"
	require.LessOrEqual(t, len(schemaChannel(long)), 63)
	require.NotEqual(t, schemaChannel(long), schemaChannel(other))
}
