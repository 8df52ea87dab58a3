package pgrouter

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/internal/contract"
)

// firstLeases is an instant before every lease's expiry: a first page of
// leases starts after it.
var firstLeases = time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)

// LeasePage returns a page of the Router's queue's leased jobs, the lease
// expiring soonest first (ties in enqueue order), after settling what is
// due, as Leases returns them (no payload, checkpoint or Errors). NextCursor (""
// on the last page) names the page's last lease by its expiry and its
// job's enqueue order, valid in every process; the next page holds the
// leases after it in that order. A heartbeat only moves a lease later,
// so following the cursors never skips a lease held throughout; one
// heartbeated after its page may be listed again on a later page. A
// Limit below 0 or above leaserouter.MaxListLimit, or a cursor that is
// malformed, not of a leases page or made on another queue, is an error
// wrapping ErrInvalidOptions, without a round trip. One round trip, a
// walk of the index of leased jobs by expiry from the cursor's instant,
// whatever the page's number (leases granted by one claim share their
// expiry: those of the instant a page starts or ends at are read
// together, at most a claim's batch). It works after Close. Errors wrap the
// driver's. Safe for concurrent use.
func (r *Router[T]) LeasePage(ctx context.Context, p leaserouter.LeasesParams) (leaserouter.JobPage[T], error) {
	return leasePage[T](ctx, r, p)
}

// LeasePageJSON is LeasePage for the console (console.Source): the same
// jobs, without payload, as json.RawMessage jobs; its cursors, cost and
// errors are LeasePage's.
func (r *Router[T]) LeasePageJSON(ctx context.Context, p leaserouter.LeasesParams) (leaserouter.JobPage[json.RawMessage], error) {
	return leasePage[json.RawMessage](ctx, r, p)
}

// leasePage is LeasePage with jobs of payload type P (none is read).
func leasePage[P, T any](ctx context.Context, r *Router[T], p leaserouter.LeasesParams) (leaserouter.JobPage[P], error) {
	ctx = orBackground(ctx)
	var page leaserouter.JobPage[P]
	limit, err := contract.LeasesLimit(leaserouter.ErrInvalidOptions, p.Limit)
	if err != nil {
		return page, err
	}
	afterAt, afterSeq := firstLeases, int64(-1)
	if p.Cursor != "" {
		at, seq, err := contract.DecodeLeaseCursor(leaserouter.ErrInvalidOptions, r.opts.Queue, p.Cursor)
		if err != nil {
			return page, err
		}
		// PostgreSQL's timestamps hold 4714 BC to 294276 AD (every later
		// instant in microseconds fits); a made-up earlier one would
		// overflow the driver's encoding and be taken as another.
		if at < minCursorMicros || seq > math.MaxInt64 {
			return page, fmt.Errorf("%w: LeasesParams.Cursor: not of a leases page", leaserouter.ErrInvalidOptions)
		}
		afterAt, afterSeq = time.UnixMicro(at), int64(seq)
	}
	b := &pgx.Batch{}
	r.queueSettle(b)
	b.Queue(r.st.leasesPage, args{"queue": r.opts.Queue, "after_at": afterAt, "after_seq": afterSeq, "limit": limit + 1})
	res := r.db.SendBatch(ctx, b)
	settled, err := readSettle(res)
	var last int64
	if err == nil {
		last, err = readPage(res, limit, r.opts.kinds, &page)
	}
	if cerr := res.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return leaserouter.JobPage[P]{}, errWrap("LeasePage", err)
	}
	r.settled(ctx, settled)
	if len(page.Jobs) > limit {
		page.Jobs = page.Jobs[:limit]
		page.NextCursor = contract.EncodeLeaseCursor(r.opts.Queue, page.Jobs[limit-1].LeaseExpiry.UnixMicro(), uint64(last))
	}
	return page, nil
}

// LeasePage is Router.LeasePage of the queue.
func (q *Queue) LeasePage(ctx context.Context, p leaserouter.LeasesParams) (leaserouter.JobPage[json.RawMessage], error) {
	r, err := q.router()
	if err != nil {
		return leaserouter.JobPage[json.RawMessage]{}, err
	}
	return r.LeasePage(ctx, p)
}

// LeasePageJSON is LeasePage, for a console.
func (q *Queue) LeasePageJSON(ctx context.Context, p leaserouter.LeasesParams) (leaserouter.JobPage[json.RawMessage], error) {
	return q.LeasePage(ctx, p)
}

// minCursorMicros is the earliest instant a leases cursor of this backend
// can name: PostgreSQL's earliest timestamptz (4714-11-24 BC), in
// microseconds since 1970.
const minCursorMicros = -210866803200000000
