package pgrouter

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestConcurrentIndexMigrations: the embedded migrations marked as
// concurrent index builds (concurrentMarker) are read with their index's
// name, 0011 among them; every other one runs in a transaction.
func TestConcurrentIndexMigrations(t *testing.T) {
	migs, err := migrations("")
	require.NoError(t, err)
	indexes := map[int]string{}
	for _, m := range migs {
		if m.up.index != "" {
			indexes[m.version] = m.up.index
		}
	}
	require.Equal(t, map[int]string{11: "leaserouter_jobs_id", 15: "leaserouter_jobs_kind_ready", 16: "leaserouter_jobs_kind_order", 17: "leaserouter_jobs_kind_list", 18: "leaserouter_jobs_kind_order", 21: "leaserouter_jobs_ready",
		23: "leaserouter_jobs_id_unleased", 24: "leaserouter_jobs_id_leased", 25: "leaserouter_jobs_id",
		26: "leaserouter_jobs_order_unleased", 27: "leaserouter_jobs_order",
		28: "leaserouter_jobs_leased_seq", 29: "leaserouter_jobs_id_leased"}, indexes)
}

// TestConcurrentIndexStatement: a concurrent index build's text is one
// CREATE INDEX CONCURRENTLY IF NOT EXISTS, comments aside; anything else
// (two statements, a build without IF NOT EXISTS) is refused.
func TestConcurrentIndexStatement(t *testing.T) {
	for text, index := range map[string]string{
		"-- a comment\nCREATE INDEX CONCURRENTLY IF NOT EXISTS x_y ON t (a,\n\tb);\n": "x_y",
		"CREATE INDEX CONCURRENTLY IF NOT EXISTS x ON t (a)":                          "x",
		"CREATE INDEX CONCURRENTLY x ON t (a);":                                       "",
		"CREATE INDEX CONCURRENTLY IF NOT EXISTS x ON t (a); DROP TABLE t;":           "",
		"CREATE INDEX IF NOT EXISTS x ON t (a);":                                      "",
		"DROP INDEX CONCURRENTLY IF EXISTS x_y;":                                      "drop x_y",
		"DROP INDEX CONCURRENTLY x_y;":                                                "",
		"DROP INDEX IF EXISTS x_y;":                                                   "",
		"DROP INDEX CONCURRENTLY IF EXISTS x_y; DROP TABLE t;":                        "",
	} {
		m := concurrentIndex.FindStringSubmatch(sqlStatement(text))
		if index == "" {
			require.Nil(t, m, text)
			continue
		}
		if name, ok := strings.CutPrefix(index, "drop "); ok {
			require.Equal(t, []string{name, ""}, []string{m[2], m[1]}, text)
			continue
		}
		require.Equal(t, []string{index, ""}, []string{m[1], m[2]}, text)
	}
}
