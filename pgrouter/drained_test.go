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
// job: it runs at each wake-up of the Client's queues while they drain,
// so a count of a backlog of n jobs would make a drain cost n rows a
// check (its generic plan too, the one a connection keeps).
func TestDrainedCheckReadsARowNotTheBacklog(t *testing.T) {
	db := pgtest.New(t)
	r := routerOn[int](t, db, pgrouter.Options{Kind: "k"})
	const n = 3000
	jobs := make([]leaserouter.JobSpec[int], n)
	for i := range jobs {
		jobs[i] = leaserouter.JobSpec[int]{ID: fmt.Sprint("j", i), Payload: i}
	}
	_, err := r.EnqueueMany(t.Context(), jobs)
	require.NoError(t, err)
	_, err = db.Exec(t.Context(), `VACUUM ANALYZE leaserouter_jobs`)
	require.NoError(t, err)
	for _, generic := range []bool{true, false} {
		t.Run(fmt.Sprintf("generic=%v", generic), func(t *testing.T) {
			raw := explainStatement(t, db, "client_unfinished", generic,
				map[string]any{"queues": []string{pgrouter.DefaultQueue}, "kinds": []string{"other", "k"}})
			var out []struct{ Plan planNode }
			require.NoError(t, json.Unmarshal(raw, &out))
			read := out[0].Plan.read(func(p planNode) bool { return p.Relation == "leaserouter_jobs" })
			require.LessOrEqual(t, read, 16, "rows read to tell a backlog of %d is not drained:\n%s", n, raw)
		})
	}
}
