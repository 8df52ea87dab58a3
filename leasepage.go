package leaserouter

import "github.com/leaserouter/leaserouter/internal/contract"

// LeasesParams selects a page of the live leases (LeasePage).
type LeasesParams struct {
	// Cursor is "" for the first page, else the NextCursor of the page
	// before.
	Cursor string
	// Limit is the most leases a page holds: 0 means DefaultListLimit, at
	// most MaxListLimit; more, or negative, is an error.
	Limit int
}

// LeasePage returns a page of the leased jobs, the lease expiring
// soonest first (ties in enqueue order), after settling what is due, as
// Leases returns them (no payload, no checkpoint; LeaseExpiry, LeasedAt,
// UpdatedAt, holder and fencing token). NextCursor ("" on the last page)
// names the page's last lease by its expiry and its job's enqueue order:
// the next page holds the leases after it in that order. A heartbeat
// only moves a lease later, so following the cursors never skips a
// lease held throughout; one heartbeated after its page may be listed
// again on a later page. A Limit below 0 or above MaxListLimit, or a
// cursor that is malformed or not of a leases page, is an error
// wrapping ErrInvalidOptions. Under the router's lock it costs
// O(Limit log Limit), plus a step per 1,024 leases before the cursor and
// per lease before it extended out of expiry order (few: each lease
// extended past the latest expiry yet joins the end of the order). It
// works after Close (no lease survives Close: none). Safe for
// concurrent use.
func (r *Router[T]) LeasePage(p LeasesParams) (JobPage[T], error) {
	var page JobPage[T]
	limit, err := contract.LeasesLimit(ErrInvalidOptions, p.Limit)
	if err != nil {
		return page, err
	}
	var before func(j *job[T]) bool
	if p.Cursor != "" {
		at, seq, err := contract.DecodeLeaseCursor(ErrInvalidOptions, "", p.Cursor)
		if err != nil {
			return page, err
		}
		before = func(j *job[T]) bool { return j.at < at || j.at == at && j.seq <= seq }
	}
	rows := make([]jobRow, 0, limit+1)
	var lastAt int64
	var lastSeq uint64
	r.lockSettled()
	r.leases.SmallestAfter(before, limit+1, func(j *job[T]) bool {
		if len(rows) == limit { // one more than the page: there is a next one
			rows = append(rows, jobRow{})
			return false
		}
		rows = append(rows, r.row(j, false))
		lastAt, lastSeq = j.at, j.seq
		return true
	})
	r.unlockAndDeliver()
	if len(rows) > limit {
		rows = rows[:limit]
		page.NextCursor = contract.EncodeLeaseCursor("", lastAt, lastSeq)
	}
	page.Jobs = make([]Job[T], len(rows))
	var none T
	for i := range rows {
		page.Jobs[i] = withPayload(&rows[i], none)
	}
	return page, nil
}
