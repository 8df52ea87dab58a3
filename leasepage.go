package leaserouter

import (
	"cmp"
	"runtime"
	"slices"

	"github.com/leaserouter/leaserouter/internal/contract"
)

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
// Leases returns them (no payload, checkpoint or Errors; LeaseExpiry, LeasedAt,
// UpdatedAt, holder and fencing token). NextCursor ("" on the last page)
// names the page's last lease by its expiry and its job's enqueue order:
// the next page holds the leases after it in that order. A heartbeat
// only moves a lease later, so following the cursors never skips a
// lease held throughout; one heartbeated after its page may be listed
// again on a later page. A Limit below 0 or above MaxListLimit, or a
// cursor that is malformed or not of a leases page, is an error
// wrapping ErrInvalidOptions. The first page costs O(Limit log Limit).
// A later page reads every lease, a bounded number at a time (as List
// does), so its cost grows with the leases held, and it never holds up
// lease operations for long. It works after Close (no lease survives
// Close: none). Safe for concurrent use.
func (r *Router[T]) LeasePage(p LeasesParams) (JobPage[T], error) {
	// The first page is O(Limit log Limit) under the router's lock; a
	// later page reads the leases in holds of the lock that each look at
	// a bounded number of jobs (listBudget, as List's do).
	var page JobPage[T]
	limit, err := contract.LeasesLimit(ErrInvalidOptions, p.Limit)
	if err != nil {
		return page, err
	}
	var rows []leaseRow
	if p.Cursor == "" {
		rows = make([]leaseRow, 0, limit+1)
		r.lockSettled()
		r.leases.Smallest(limit+1, func(j *job[T]) bool {
			rows = append(rows, leaseRow{at: j.at, seq: j.seq, row: r.row(j, false)})
			return true
		})
		r.unlockAndDeliver()
	} else {
		at, seq, err := contract.DecodeLeaseCursor(ErrInvalidOptions, "", p.Cursor)
		if err != nil {
			return page, err
		}
		rows = r.leasesAfter(at, seq, limit+1)
	}
	if len(rows) > limit {
		last := rows[limit-1]
		rows = rows[:limit]
		page.NextCursor = contract.EncodeLeaseCursor("", last.at, last.seq)
	}
	page.Jobs = make([]Job[T], len(rows))
	var none T
	for i := range rows {
		page.Jobs[i] = withPayload(&rows[i].row, none)
	}
	return page, nil
}

// leaseRow is a lease as a page copies it, with its place in the order of
// the leases (expiry, then enqueue order).
type leaseRow struct {
	at  int64
	seq uint64
	row jobRow
}

func (a *leaseRow) cmp(b *leaseRow) int {
	return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.seq, b.seq))
}

// leasesAfter returns the n first leases after (at, seq) in the order of
// the leases. The lease heap cannot be entered at a cursor (a lease
// extended at the instant a batch was granted sorts among its leases, and
// such leases sit in the heap part, all of which a walk from the cursor
// would visit), so it walks the enqueue order instead, skipping the
// chunks with no leased job, listBudget slots per hold of the lock (as
// List does). A hold only copies the leases that would enter the page
// into a slice grown before it; the page is sorted and cut between holds.
func (r *Router[T]) leasesAfter(at int64, seq uint64, n int) []leaseRow {
	cursor := leaseRow{at: at, seq: seq}
	var (
		top    []leaseRow // the n first found so far, in order
		found  []leaseRow
		before uint64
	)
	for {
		found = slices.Grow(found[:0], listBudget)
		r.lockSettled()
		resume, more := r.order.Walk(before, 1<<StateLeased, listBudget, func(j *job[T]) bool {
			if j.state != StateLeased {
				return true
			}
			l := leaseRow{at: j.at, seq: j.seq}
			if l.cmp(&cursor) <= 0 || len(top) == n && l.cmp(&top[n-1]) >= 0 {
				return true
			}
			l.row = r.row(j, false)
			found = append(found, l)
			return len(found) < listBudget
		})
		r.unlockAndDeliver()
		top = append(top, found...)
		slices.SortFunc(top, func(a, b leaseRow) int { return a.cmp(&b) })
		top = top[:min(len(top), n)]
		if !more {
			return top
		}
		before = resume
		runtime.Gosched()
	}
}
