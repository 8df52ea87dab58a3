package pgrouter

import (
	"context"
	"fmt"
	"io/fs"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Every statement of sql/ is compiled at load: its named parameters
// become $n ordinals, none is left behind (outside comments), and args
// binds them in that order.
func TestStatementsCompiled(t *testing.T) {
	files, err := fs.Glob(statementFiles, "sql/*.sql")
	require.NoError(t, err)
	// claim.sql and claim_arm.sql are the claim's templates (statements.claim);
	// a statement of lockForms is compiled twice (its two lock forms).
	require.Len(t, compiled, len(files)-2+len(lockFormsOf)/2, "a statement of sql/ not loaded, or loaded twice")
	for text, p := range compiled {
		for _, line := range strings.Split(p.sql, "\n") {
			if code, _, _ := strings.Cut(line, "--"); namedParam.MatchString(code) {
				t.Errorf("named parameter left in %q", line)
			}
		}
		a := args{}
		for _, n := range p.names {
			a[n] = "v_" + n
		}
		sql, bound, err := a.RewriteQuery(context.Background(), nil, text, nil)
		require.NoError(t, err)
		require.Equal(t, p.sql, sql)
		for i, n := range p.names {
			require.Equal(t, "v_"+n, bound[i], "$%d", i+1)
		}
	}
}

// args binds by name into the compiled order, and refuses, naming it, a
// parameter missing or not used, and a text that is no statement of sql/.
func TestArgsBinding(t *testing.T) {
	ctx := context.Background()
	sql, bound, err := args{"queue": "q", "id": "j"}.RewriteQuery(ctx, nil, defaultStatements.getJob, nil)
	require.NoError(t, err)
	require.Contains(t, sql, "WHERE queue = $1 AND id = $2")
	require.Equal(t, []any{"q", "j"}, bound)

	_, _, err = args{"queue": "q"}.RewriteQuery(ctx, nil, defaultStatements.getJob, nil)
	require.ErrorContains(t, err, "argument @id of the statement is not given")
	_, _, err = args{"queue": "q", "id": "j", "idd": "x"}.RewriteQuery(ctx, nil, defaultStatements.getJob, nil)
	require.ErrorContains(t, err, "argument @idd is not used by the statement")
	_, _, err = args{"queue": "q", "id": "j"}.RewriteQuery(ctx, nil, "SELECT @queue, @id", nil)
	require.ErrorContains(t, err, "not a statement of sql/")
}

// Each arm of the claim walks its kind unlocked, bounded by
// claimArmBound, far above claimMax (the arms count rows other claims
// hold against their bound: see claim.sql); the one lock is the lateral
// one, by ctid, per row taken.
func TestClaimArmBoundAndOneLockPerRow(t *testing.T) {
	require.GreaterOrEqual(t, claimArmBound, 64*claimMax)
	for _, k := range []int{1, 3} {
		text := sqlStatement(defaultStatements.claim(k)) // without its comments
		require.Equal(t, k, strings.Count(text, fmt.Sprintf("LIMIT %d) a", claimArmBound)), "k=%d", k)
		require.Equal(t, 1, strings.Count(text, "FOR UPDATE SKIP LOCKED"), "k=%d", k)
		require.Contains(t, text, "WHERE l.ctid = c.ctid")
	}
}
