package pgrouter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/internal/contract"
)

// batch is a batch's columns, as insertJobs takes them.
type batch struct {
	ids      []string
	priority []int64
	maxAtt   []int32
	payload  []string
	runAt    []*time.Time
	delay    []int64
	timeout  []int64   // each attempt's limit (WithTimeout), microseconds; 0 for none
	meta     []*string // WithMetadata's pairs as a JSON object; nil for none
	index    []int     // the caller's index of each row
	kind     string    // every row's kind
}

// addJob checks one job and appends it to b, or returns an error wrapping
// ErrInvalidJob.
func addJob[T any](b *batch, r *Router[T], i int, id string, payload T, opts []leaserouter.EnqueueOption) error {
	s := contract.EnqueueSettings{MaxAttempts: r.opts.MaxAttempts}
	if err := contract.ReadEnqueueOptions(leaserouter.ErrInvalidJob, &s, id, opts); err != nil {
		return err
	}
	if err := contract.CheckQueue(leaserouter.ErrInvalidJob, &s, id, r.opts.Queue); err != nil {
		return err
	}
	p, err := encode(id, payload)
	if err != nil {
		return err
	}
	var meta *string
	if s.Metadata != nil {
		// Valid UTF-8 without NUL (contract.MetadataProblem): it encodes,
		// and jsonb takes it.
		m, err := json.Marshal(s.Metadata)
		if err != nil {
			return fmt.Errorf("%w: WithMetadata for job %q: %v", leaserouter.ErrInvalidJob, id, err)
		}
		ms := string(m)
		meta = &ms
	}
	var at *time.Time
	if !s.RunAt.IsZero() {
		at = &s.RunAt
	}
	b.ids = append(b.ids, id)
	b.priority = append(b.priority, int64(s.Priority))
	b.maxAtt = append(b.maxAtt, int32(s.MaxAttempts))
	b.payload = append(b.payload, p)
	b.runAt = append(b.runAt, at)
	b.delay = append(b.delay, s.Delay.Microseconds())
	b.timeout = append(b.timeout, ceilMicros(s.Timeout))
	b.meta = append(b.meta, meta)
	b.index = append(b.index, i)
	return nil
}

// insert runs insertNewJobs or insertJobs for b on q and returns the IDs
// inserted, with the instant each was, and an EventPurged for each
// finished job past its retention whose row an inserted job took. It
// first waits for room in the event backlog (see insertRoomed, which
// says which statement runs).
func (r *Router[T]) insert(ctx context.Context, q querier, b *batch) (map[string]time.Time, []leaserouter.Event, error) {
	if err := r.ev.awaitRoom(ctx); err != nil {
		return nil, nil, err
	}
	return r.insertRoomed(ctx, q, b)
}

// insertRoomed is insert without the wait for room, for a caller that
// waited before it took locks a wait must not hold (a periodic job's
// row: a slow hook here would stall that job's ticks in every process).
//
// On the Router's own pool (not a caller's transaction) it runs
// insertNewJobs, a plain INSERT that logs no speculative-insertion
// confirmation a row (48 bytes of WAL a job), and insertJobs (INSERT ...
// ON CONFLICT) only when the first one inserted nothing and deferred to
// it (the batch names a finished job past its retention, whose row the
// new job takes) or failed with a unique violation (an ID inserted by a
// transaction that committed after its snapshot; nothing it wrote
// stays). Known IDs are no failure: the plain statement leaves them out
// as duplicates, as insertJobs does. In a caller's transaction a failed
// statement would abort it, so insertJobs runs alone there.
func (r *Router[T]) insertRoomed(ctx context.Context, q querier, b *batch) (map[string]time.Time, []leaserouter.Event, error) {
	a := args{"queue": r.opts.Queue, "channel": r.channel, "ids": b.ids,
		"priorities": b.priority, "max_attempts": b.maxAtt, "payloads": b.payload, "run_at": b.runAt, "delay_us": b.delay,
		"timeout_us": b.timeout, "kind": b.kind, "metadata": b.meta}
	if q == querier(r.db) {
		rows, err := q.Query(ctx, r.st.insertNewJobs, a)
		inserted, _, deferred, err := readInserted(len(b.ids), rows, err)
		if err == nil && !deferred {
			return inserted, nil, nil
		}
		if err != nil && !isUniqueViolation(err) {
			return nil, nil, err
		}
	}
	rows, err := q.Query(ctx, r.st.insertJobs, a)
	inserted, purged, _, err := readInserted(len(b.ids), rows, err)
	return inserted, purged, err
}

// isUniqueViolation reports whether err is PostgreSQL's unique_violation
// (SQLSTATE 23505) in the jobs table (whose only unique index is its
// primary key).
func isUniqueViolation(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505" && pe.TableName == "leaserouter_jobs"
}

// readInserted reads the rows of insertJobs or insertNewJobs for n IDs:
// the IDs inserted, with the instant each was, an EventPurged for each
// finished job past its retention whose row an inserted job took, and
// whether insertNewJobs deferred to insertJobs (its row of NULLs).
func readInserted(n int, rows pgx.Rows, err error) (inserted map[string]time.Time, purged []leaserouter.Event, deferred bool, _ error) {
	if err != nil {
		return nil, nil, false, err
	}
	defer rows.Close()
	inserted = make(map[string]time.Time, n)
	for rows.Next() {
		var id *string
		var at *time.Time
		var notified int64
		var token *int64
		var attempt *int32
		var purgeAt *time.Time
		if err := rows.Scan(&id, &at, &notified, &token, &attempt, &purgeAt); err != nil {
			return nil, nil, false, err
		}
		if id == nil || at == nil {
			deferred = true
			continue
		}
		inserted[*id] = *at
		if token != nil && attempt != nil && purgeAt != nil { // the row of a finished job past its retention: purged now
			purged = append(purged, leaserouter.Event{Kind: leaserouter.EventPurged, Time: *purgeAt, JobID: *id,
				Token: leaserouter.Token(*token), Attempt: int(*attempt)})
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, false, err
	}
	return inserted, purged, deferred, nil
}

// replacedPurged counts and reports the finished jobs an enqueue's rows
// replaced (purged by that statement, as the maintenance loop purges
// others), before the enqueue's own events.
func (r *Router[T]) replacedPurged(purged []leaserouter.Event) {
	if len(purged) > 0 {
		r.counted(&r.stats.Purged, purged)
	}
}

// enqueued reports the events of an enqueue of ids, in order: enqueued
// for those inserted, duplicate for the rest.
func (r *Router[T]) enqueued(kind string, ids []string, inserted map[string]time.Time) {
	if r.ev == nil {
		return
	}
	evs := make([]leaserouter.Event, len(ids))
	now := time.Now()
	for i, id := range ids {
		if at, ok := inserted[id]; ok {
			evs[i] = leaserouter.Event{Kind: leaserouter.EventEnqueued, Time: at, JobID: id, JobKind: kind}
			delete(inserted, id) // a repeat within the batch is a duplicate
		} else {
			evs[i] = leaserouter.Event{Kind: leaserouter.EventDuplicate, Time: now, JobID: id, Err: leaserouter.ErrDuplicate, JobKind: kind}
		}
	}
	r.emit(evs...)
}

// Enqueue adds a job of the Router's kind (Options.Kind), pending at once
// or scheduled by WithDelay/WithRunAt (times on the database's clock),
// with WithMetadata's pairs if given, and wakes Acquires of the queue in
// every process. It returns ErrDuplicate if the queue knows id (a
// finished job past its Retention is not known any more), an error
// wrapping ErrInvalidJob for an id that breaks the core's rule for IDs
// (empty, not valid UTF-8, holding NUL, over leaserouter.MaxIDBytes; the
// core's error, from leaserouter.ValidateID), bad options or a payload
// that does not encode as JSON, ErrClosed after Close, or an error
// wrapping the driver's. WithQueue naming another queue than
// Options.Queue, and metadata over leaserouter.MaxMetadataPairs or
// MaxMetadataBytes (or with an empty key or a NUL), are ErrInvalidJob
// too. Invalid input is refused before any round trip.
// It commits on its own; see EnqueueTx.
func (r *Router[T]) Enqueue(ctx context.Context, id string, payload T, opts ...leaserouter.EnqueueOption) error {
	return r.enqueue(orBackground(ctx), r.db, id, payload, opts)
}

// EnqueueTx is Enqueue as part of the caller's transaction tx: the job
// exists, and wakes other processes, only if tx commits. A known id
// returns ErrDuplicate and leaves tx usable. A nil tx is an error wrapping
// ErrInvalidOptions. Stats counts the job as enqueued when the statement
// succeeds, whether or not tx then commits. An invalid id or option is
// refused as by Enqueue, before any statement: tx stays usable.
func (r *Router[T]) EnqueueTx(ctx context.Context, tx pgx.Tx, id string, payload T, opts ...leaserouter.EnqueueOption) error {
	if tx == nil {
		return fmt.Errorf("%w: EnqueueTx: nil tx", leaserouter.ErrInvalidOptions)
	}
	return r.enqueue(orBackground(ctx), tx, id, payload, opts)
}

// enqueue is Enqueue and EnqueueTx, of a job of r's kind.
func (r *Router[T]) enqueue(ctx context.Context, q querier, id string, payload T, opts []leaserouter.EnqueueOption) error {
	return r.enqueueKind(ctx, q, r.opts.Kind, id, payload, opts)
}

// enqueueKind is Enqueue on q of a job of kind, which the caller checked
// (a Client's, for its registered kinds: the queue's Router encodes the
// payload, json.RawMessage or T).
func (r *Router[T]) enqueueKind(ctx context.Context, q querier, kind, id string, payload T, opts []leaserouter.EnqueueOption) error {
	b := batch{kind: kind}
	if err := addJob(&b, r, 0, id, payload, opts); err != nil {
		return err
	}
	if err := r.open(); err != nil {
		return err
	}
	inserted, purged, err := r.insert(ctx, q, &b)
	if err != nil {
		return errWrap("Enqueue", err)
	}
	_, ok := inserted[id]
	r.replacedPurged(purged)
	r.enqueued(b.kind, b.ids, inserted)
	r.mu.Lock()
	defer r.mu.Unlock()
	if !ok {
		r.stats.Duplicates++
		return fmt.Errorf("%w: %q", leaserouter.ErrDuplicate, id)
	}
	r.stats.Enqueued++
	return nil
}

// EnqueueMany enqueues jobs of the Router's kind, as Enqueue does, in
// slice order (their enqueue order, for ties in the ready order),
// committed in one transaction by one statement (unnest arrays): a plain
// INSERT, which writes less WAL than an INSERT ... ON CONFLICT. When the
// batch names a finished job past its retention (whose row a new job
// takes) or an ID another transaction inserted while the statement ran,
// that statement inserts nothing and a second one, with ON CONFLICT,
// enqueues the batch (in the second case the server logs the first
// one's unique violation as an error: the race, not a failure of the
// call). Enqueue runs the same way; EnqueueTx runs the ON CONFLICT
// statement alone, as a failed statement would abort the caller's
// transaction. IDs the queue knows, or that repeat an earlier ID of the
// batch, are skipped as duplicates and their indexes returned in order.
// All or nothing: an invalid job (an ID leaserouter.ValidateID refuses,
// a bad option, a payload that does not encode: the error wraps
// ErrInvalidJob, names the problem and the job's batch index, as
// "(batch index i)"), ErrClosed or a database error
// enqueue nothing. An empty or
// nil batch enqueues nothing and returns nil, nil. jobs is not retained.
func (r *Router[T]) EnqueueMany(ctx context.Context, jobs []leaserouter.JobSpec[T]) (duplicates []int, err error) {
	return r.enqueueManyKind(orBackground(ctx), r.db, r.opts.Kind, jobs)
}

// enqueueManyKind is EnqueueMany on q of jobs of kind, which the caller
// checked (see enqueueKind).
func (r *Router[T]) enqueueManyKind(ctx context.Context, q querier, kind string, jobs []leaserouter.JobSpec[T]) (duplicates []int, err error) {
	b := batch{kind: kind}
	seen := make(map[string]bool, len(jobs))
	for i, j := range jobs {
		if err := addJob(&b, r, i, j.ID, j.Payload, j.Options); err != nil {
			return nil, contract.AtBatchIndex(err, i)
		}
	}
	if len(jobs) == 0 {
		return nil, nil
	}
	if err := r.open(); err != nil {
		return nil, err
	}
	// One statement cannot touch a row twice: a repeat within the batch
	// is a duplicate on the client, before the database sees it.
	first := batch{kind: b.kind}
	var repeats []int
	for k, id := range b.ids {
		if seen[id] {
			repeats = append(repeats, b.index[k])
			continue
		}
		seen[id] = true
		first.ids = append(first.ids, id)
		first.priority = append(first.priority, b.priority[k])
		first.maxAtt = append(first.maxAtt, b.maxAtt[k])
		first.payload = append(first.payload, b.payload[k])
		first.runAt = append(first.runAt, b.runAt[k])
		first.delay = append(first.delay, b.delay[k])
		first.timeout = append(first.timeout, b.timeout[k])
		first.meta = append(first.meta, b.meta[k])
		first.index = append(first.index, b.index[k])
	}
	inserted, purged, err := r.insert(ctx, q, &first)
	if err != nil {
		return nil, errWrap("EnqueueMany", err)
	}
	r.replacedPurged(purged)
	for k, id := range first.ids {
		if _, ok := inserted[id]; !ok {
			repeats = append(repeats, first.index[k])
		}
	}
	slices.Sort(repeats)
	duplicates = repeats
	n := len(inserted)
	r.enqueued(b.kind, b.ids, inserted)
	r.mu.Lock()
	r.stats.Enqueued += uint64(n)
	r.stats.Duplicates += uint64(len(duplicates))
	r.mu.Unlock()
	return duplicates, nil
}
