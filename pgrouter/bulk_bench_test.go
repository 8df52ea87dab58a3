package pgrouter_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// Bulk actions at the console's bound (10,000 jobs).

// benchBulk times retry of bulkN canceled jobs by retry (one call per
// iteration), the jobs made canceled again before each (untimed).
func benchBulk(b *testing.B, retry func(ctx context.Context, r *pgrouter.Router[int], ids []string) error) {
	const bulkN = 10000
	ctx := context.Background()
	db := pgtest.New(b)
	r, err := pgrouter.New[int](ctx, db, pgrouter.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close(ctx)
	ids := make([]string, bulkN)
	jobs := make([]leaserouter.JobSpec[int], bulkN)
	for i := range ids {
		ids[i] = fmt.Sprintf("job-%05d", i)
		jobs[i] = leaserouter.JobSpec[int]{ID: ids[i]}
	}
	if _, err := r.EnqueueMany(ctx, jobs); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		b.StopTimer()
		if _, err := db.Exec(ctx, `UPDATE leaserouter_jobs SET state = 'canceled', purge_at = clock_timestamp() + interval '1 hour'
			WHERE queue = 'default'`); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if err := retry(ctx, r, ids); err != nil {
			b.Fatal(err)
		}
	}
}

// One Retry per job: what the console's bulk retry did, 10,000 round trips.
func BenchmarkRetry10000OneByOne(b *testing.B) {
	benchBulk(b, func(ctx context.Context, r *pgrouter.Router[int], ids []string) error {
		for _, id := range ids {
			if err := r.Retry(ctx, id); err != nil {
				return err
			}
		}
		return nil
	})
}

// One Retry of one job: the single call's round trip.
func BenchmarkRetryOne(b *testing.B) {
	ctx := context.Background()
	db := pgtest.New(b)
	r, err := pgrouter.New[int](ctx, db, pgrouter.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close(ctx)
	if err := r.Enqueue(ctx, "one", 1); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		b.StopTimer()
		if _, err := db.Exec(ctx, `UPDATE leaserouter_jobs SET state = 'canceled', purge_at = clock_timestamp() + interval '1 hour'
			WHERE queue = 'default'`); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if err := r.Retry(ctx, "one"); err != nil {
			b.Fatal(err)
		}
	}
}

// RetryMany: one statement for the 10,000 jobs.
func BenchmarkRetry10000RetryMany(b *testing.B) {
	benchBulk(b, func(ctx context.Context, r *pgrouter.Router[int], ids []string) error {
		res, err := r.RetryMany(ctx, ids, []leaserouter.State{leaserouter.StateCanceled})
		if err == nil && res.Done != len(ids) {
			err = fmt.Errorf("retried %+v", res)
		}
		return err
	})
}
