package pgrouter_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// Drained's check of the job set reads a row or so, not every unfinished
// job, nor every finished one: it runs at each wake-up of the Client's
// queues while they drain, so a count of a backlog of n jobs would make a
// drain cost n rows a check, and a scan of the queue would cost a check
// of a drained Client every job kept (its generic plan too, the one a
// connection keeps).
func TestDrainedCheckReadsARowNotTheBacklog(t *testing.T) {
	db := pgtest.New(t)
	const n = 3000
	for _, kind := range []string{"k", "done"} {
		r := routerOn[int](t, db, pgrouter.Options{Kind: kind})
		jobs := make([]leaserouter.JobSpec[int], n)
		for i := range jobs {
			jobs[i] = leaserouter.JobSpec[int]{ID: fmt.Sprint(kind, i), Payload: i}
		}
		_, err := r.EnqueueMany(t.Context(), jobs)
		require.NoError(t, err)
	}
	_, err := db.Exec(t.Context(), `UPDATE leaserouter_jobs SET state = 'succeeded', purge_at = now() + interval '1 hour' WHERE kind = 'done'`)
	require.NoError(t, err)
	_, err = db.Exec(t.Context(), `VACUUM ANALYZE leaserouter_jobs`)
	require.NoError(t, err)
	for _, c := range []struct {
		kinds []string
		left  bool
	}{{[]string{"other", "k"}, true}, {[]string{"done", "other"}, false}} {
		for _, generic := range []bool{true, false} {
			t.Run(fmt.Sprintf("%v/generic=%v", c.kinds, generic), func(t *testing.T) {
				a := map[string]any{"queues": []string{pgrouter.DefaultQueue}, "kinds": c.kinds}
				raw := explainStatement(t, db, "client_unfinished", generic, a)
				var out []struct{ Plan planNode }
				require.NoError(t, json.Unmarshal(raw, &out))
				read := out[0].Plan.read(func(p planNode) bool { return p.Relation == "leaserouter_jobs" })
				require.LessOrEqual(t, read, 16, "rows read to tell whether %v have unfinished jobs among %d:\n%s", c.kinds, 2*n, raw)
				sql, names := pgrouter.Statement("client_unfinished")
				var left bool
				require.NoError(t, db.QueryRow(t.Context(), sql, bindPositional(names, a)...).Scan(&left))
				require.Equal(t, c.left, left)
			})
		}
	}
}
