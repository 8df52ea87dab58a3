package pgrouter

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leaserouter/leaserouter"
)

// Counts at scale: Stats and
// Queues count each state of a queue one by one only while it has at most
// countCap jobs, and estimate a larger one from the planner's statistics
// (job_stats.sql, migration 0008), so that they take milliseconds at
// millions of jobs; ExactStats and ExactQueues count every job.

// countCap is the most jobs of a queue in one state that Stats and Queues
// count one by one: a walk of the index leaserouter_jobs_order_unleased
// from the state's oldest job (the leased state: of
// leaserouter_jobs_leased, the queue's leases in flight), index only
// where the visibility map covers the rows, else a read of each row (jobs
// changed since the last vacuum). A
// state with more is estimated (a plan: ~1ms). Measured on a busy 2-core
// machine at 10M rows, a Stats whose six states all have more than the
// cap (each walks cap+1 entries), p50 vacuumed / analyzed only: 5,000:
// 8 / 4ms; 10,000: 16 / 8ms; 20,000: 28 / 24ms; 50,000: 75 / 58ms;
// 100,000: 100 / 80ms (BenchmarkConsolePagesAt10M). 20,000 keeps Stats
// within ~30ms, a third of a console page's 100ms, while a state of up
// to 20,000 jobs (a day's failures, a bulk cancel) reads as a fact, not
// an estimate from statistics that may predate it.
const countCap = 20000

// Stats returns the queue's jobs by state (finished ones while retained),
// whether the queue is paused (in any process: Pause), and this Router's
// totals since New (other processes' calls are not in them).
//
// A state with at most 20,000 jobs is counted exactly; a state with more
// is an estimate from the planner's statistics of the jobs table (its
// rows scaled to the table's current size, times the frequency of the
// queue and state pair in the last ANALYZE's sample: the Router's
// maintenance loop and autovacuum keep them), never below 20,001, and
// Stats.Estimated is then true, and Stats.EstimatedAsOf the instant of
// those statistics (the table's last ANALYZE, in the database's clock;
// zero if it never had one):
// jobs enqueued or changed since are not in the estimate. So Stats takes
// milliseconds whatever the queue's size; ExactStats counts every job. Finished jobs past their
// Retention not yet purged are not counted (with more than 20,000 of
// them, the finished states are estimated too). Counts are what the
// table holds at that moment, without settling: a lease past its expiry
// still counts as leased until some process settles it.
//
// Stats.ReadySince is when the job first in the queue's ready order
// became ready, on the database's clock (zero when none is pending): two
// probes of the ready index per kind with pending jobs in the queue, and
// one more, whatever the number of pending jobs.
//
// One round trip. It works after Close. Errors wrap the driver's. Safe
// for concurrent use.
func (r *Router[T]) Stats(ctx context.Context) (leaserouter.Stats, error) {
	return r.countStats(orBackground(ctx), "Stats", &r.cap)
}

// ExactStats is Stats with every state counted exactly, however many jobs
// the queue has: it reads every job of the queue, which takes seconds at
// millions of jobs; Stats.Estimated is
// false. Use it where a count must be exact (a test, an audit); a
// dashboard should call Stats. One round trip, as long as the count
// takes (bounded by ctx). It works after Close. Errors wrap the
// driver's. Safe for concurrent use.
func (r *Router[T]) ExactStats(ctx context.Context) (leaserouter.Stats, error) {
	// Every job: its entries in the index leaserouter_jobs_order_unleased
	// (leased jobs: leaserouter_jobs_leased), and the rows the visibility
	// map does not cover.
	return r.countStats(orBackground(ctx), "ExactStats", nil)
}

// countStats is Stats (limit: the cap) or ExactStats (nil).
func (r *Router[T]) countStats(ctx context.Context, call string, limit *int64) (leaserouter.Stats, error) {
	b := &pgx.Batch{}
	b.Queue(r.st.jitOff, args{})
	b.Queue(r.st.statsByState, args{"queue": r.opts.Queue, "cap": limit})
	b.Queue(r.st.queuePaused, args{"queue": r.opts.Queue})
	b.Queue(r.st.jobsAnalyzed, args{})
	b.Queue(r.st.readyHead, args{"queue": r.opts.Queue})
	res := r.db.SendBatch(ctx, b)
	by, estimated, paused, err := readStats(res)
	var analyzed *time.Time
	if err == nil {
		err = res.QueryRow().Scan(&analyzed)
		if errors.Is(err, pgx.ErrNoRows) {
			err = nil
		}
	}
	var readySince time.Time // none pending: zero
	if err == nil {
		err = res.QueryRow().Scan(&readySince)
		if errors.Is(err, pgx.ErrNoRows) {
			err = nil
		}
	}
	if cerr := res.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return leaserouter.Stats{}, errWrap(call, err)
	}
	r.mu.Lock()
	s := r.stats
	r.mu.Unlock()
	s.Pending, s.Scheduled, s.Leased, s.Succeeded, s.DeadJobs, s.Canceled = by[0], by[1], by[2], by[3], by[4], by[5]
	//lint:ignore SA1019 the deprecated name is filled for one release
	s.Failed = s.DeadJobs
	s.Paused, s.Estimated = paused, estimated
	s.ReadySince = readySince
	if estimated && analyzed != nil {
		s.EstimatedAsOf = *analyzed
	}
	return s, nil
}

// readStats reads the results of Stats' batch: the counts by state,
// whether any is estimated, and whether the queue is paused.
func readStats(res pgx.BatchResults) (by [6]int, estimated, paused bool, err error) {
	if _, err := res.Exec(); err != nil { // jit_off
		return by, false, false, err
	}
	rows, err := res.Query()
	if err != nil {
		return by, false, false, err
	}
	for rows.Next() {
		var name string
		var n int64
		var est bool
		if err := rows.Scan(&name, &n, &est); err != nil {
			rows.Close()
			return by, false, false, err
		}
		if st, ok := stateNamed(name); ok && int(st) < len(by) {
			by[st] = int(max(n, 0))
		}
		estimated = estimated || est
	}
	if err := rows.Err(); err != nil {
		return by, false, false, err
	}
	err = res.QueryRow().Scan(&paused)
	return by, estimated, paused, err
}

// ExactQueues is Queues with every state of every queue counted exactly,
// as ExactStats counts one queue's: it reads every job of the table,
// which takes seconds at millions of jobs; no QueueInfo is Estimated. One round trip. It works after Close.
// Errors wrap the driver's. Safe for concurrent use.
func (r *Router[T]) ExactQueues(ctx context.Context) ([]QueueInfo, error) {
	return r.queues(orBackground(ctx), "ExactQueues", nil)
}

// queues is Queues (limit: the cap) or ExactQueues (nil).
func (r *Router[T]) queues(ctx context.Context, call string, limit *int64) ([]QueueInfo, error) {
	b := &pgx.Batch{}
	b.Queue(r.st.jitOff, args{})
	b.Queue(r.st.queuesStats, args{"cap": limit})
	b.Queue(r.st.queuesPaused, args{})
	res := r.db.SendBatch(ctx, b)
	_, err := res.Exec() // jit_off
	var qs []QueueInfo
	if err == nil {
		qs, err = readQueues(res)
	}
	if cerr := res.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, errWrap(call, err)
	}
	return qs, nil
}

// QueueStats is Stats as a leaserouter.StatsReader reports it: one entry,
// named Options.Queue, so the prometheus and otel modules observe a
// pgrouter Router as they do a core one. Errors and cost are Stats'.
func (r *Router[T]) QueueStats(ctx context.Context) ([]leaserouter.QueueStats, error) {
	s, err := r.Stats(ctx)
	if err != nil {
		return nil, err
	}
	return []leaserouter.QueueStats{{Queue: r.opts.Queue, Stats: s}}, nil
}
