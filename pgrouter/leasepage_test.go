package pgrouter_test

import (
	"encoding/json"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/internal/contract"
	"github.com/leaserouter/leaserouter/pgrouter"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// TestLeasePageAndReadyHeadReadOnlyWhatTheyShow: a page of leases deep
// into a queue's leases reads about a page of index entries from the
// cursor's instant (not the leases before it), and Stats' probe of the
// ready order reads an entry or two (one kind), however many jobs are
// pending.
func TestLeasePageAndReadyHeadReadOnlyWhatTheyShow(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := t.Context()
	r := routerOn[int](t, db, pgrouter.Options{LeaseDuration: time.Hour})
	const leased, pending = 300, 2000
	for i := range leased + pending {
		require.NoError(t, r.Enqueue(ctx, fmt.Sprintf("j%04d", i), i))
	}
	for range leased { // one by one: each lease its own expiry
		_, err := r.TryAcquire(ctx, "w")
		require.NoError(t, err)
	}
	_, err := db.Exec(ctx, "ANALYZE leaserouter_jobs")
	require.NoError(t, err)
	page, err := r.LeasePage(ctx, leaserouter.LeasesParams{Limit: 250})
	require.NoError(t, err)
	require.NotEmpty(t, page.NextCursor)
	last := page.Jobs[len(page.Jobs)-1]

	read := func(name string, values map[string]any) int {
		var out []struct{ Plan planNode }
		require.NoError(t, json.Unmarshal(explainStatement(t, db, name, true, values), &out))
		return out[0].Plan.read(func(n planNode) bool { return n.Relation == "leaserouter_jobs" || n.Index != "" })
	}
	var seq int64
	require.NoError(t, db.QueryRow(ctx, "SELECT seq FROM leaserouter_jobs WHERE id = $1", last.ID).Scan(&seq))
	n := read("leases_page", map[string]any{"queue": pgrouter.DefaultQueue, "after_at": last.LeaseExpiry, "after_seq": seq, "limit": 11})
	require.LessOrEqual(t, n, 2*11+2, "a page after 250 leases reads about a page, not the 250 before it")
	n = read("ready_head", map[string]any{"queue": pgrouter.DefaultQueue})
	require.LessOrEqual(t, n, 2, "the head of %d pending jobs of one kind: its kind, then its head", pending)
}

// A made-up leases cursor naming an instant before PostgreSQL's earliest
// timestamp, or a sequence number past a bigint's, is refused, not taken
// as another instant (it overflowed the driver's encoding and listed
// nothing).
func TestLeasePageRefusesACursorOutsideTheDatabasesRange(t *testing.T) {
	db := pgtest.New(t)
	ctx := t.Context()
	r := routerOn[int](t, db, pgrouter.Options{})
	require.NoError(t, r.Enqueue(ctx, "a", 1))
	_, err := r.TryAcquire(ctx, "w")
	require.NoError(t, err)
	for _, c := range []struct {
		at  int64
		seq uint64
	}{{math.MinInt64, 0}, {-210866803200000001, 0}, {0, math.MaxInt64 + 1}} {
		_, err := r.LeasePage(ctx, leaserouter.LeasesParams{Cursor: contract.EncodeLeaseCursor(pgrouter.DefaultQueue, c.at, c.seq)})
		require.ErrorIs(t, err, leaserouter.ErrInvalidOptions, "at %d seq %d", c.at, c.seq)
	}
	page, err := r.LeasePage(ctx, leaserouter.LeasesParams{Cursor: contract.EncodeLeaseCursor(pgrouter.DefaultQueue, -210866803200000000, 0)})
	require.NoError(t, err)
	require.Len(t, page.Jobs, 1, "the earliest instant is after no lease")
}
