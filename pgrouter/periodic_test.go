package pgrouter_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// shifted is a Schedule not aligned to the epoch: its ticks are base + k
// period for every integer k.
type shifted struct {
	base   time.Time
	period time.Duration
}

func (s shifted) Next(t time.Time) time.Time {
	d := t.Sub(s.base)
	n := d / s.period
	if d < 0 && d%s.period != 0 {
		n-- // floor, not truncation toward zero
	}
	return s.base.Add((n + 1) * s.period)
}

// tickJobs is the IDs of the jobs of queue whose IDs start with name@
// (finished ones past their retention included), in ID order.
func tickJobs(t *testing.T, db *pgxpool.Pool, queue, name string) []string {
	t.Helper()
	rows, err := db.Query(context.Background(), "SELECT id FROM leaserouter_jobs WHERE queue = $1 AND starts_with(id, $2) ORDER BY id",
		queue, name+"@")
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return ids
}

// awaitWakes waits until r's periodic scheduler has done n wake-ups.
func awaitWakes[T any](t *testing.T, r *pgrouter.Router[T], n uint64) {
	t.Helper()
	eventually(t, 10*time.Second, "the periodic scheduler's wake-ups", func() bool { return pgrouter.PeriodicWakes(r) >= n })
}

// enqueuedEvents counts the EventEnqueued a Router emits, by job ID.
type enqueuedEvents struct {
	mu  sync.Mutex
	ids map[string]int
}

func (c *enqueuedEvents) hook(ev leaserouter.Event) {
	if ev.Kind != leaserouter.EventEnqueued {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ids == nil {
		c.ids = map[string]int{}
	}
	c.ids[ev.JobID]++
}

func (c *enqueuedEvents) get() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for id, n := range c.ids {
		out[id] = n
	}
	return out
}

// TestPeriodicBadInputRegistersNothing: what AddPeriodic refuses (the
// conformance row "periodic/bad input refused...") registers nothing in
// the database; a name is added once per queue (the refusal names it),
// and may be added on another queue; a nil ctx is context.Background().
func TestPeriodicBadInputRegistersNothing(t *testing.T) {
	t.Parallel()
	r, db := newRouter[int](t, pgrouter.Options{})
	ctx := t.Context()
	every := leaserouter.Every(time.Hour)
	for _, p := range []pgrouter.Periodic[int]{
		{Schedule: every},
		{Name: "nil-schedule"},
		{Name: "delay", Schedule: every, Options: []leaserouter.EnqueueOption{leaserouter.WithDelay(time.Second)}},
		{Name: strings.Repeat("n", leaserouter.MaxIDBytes-30), Schedule: every},
	} {
		require.ErrorIs(t, r.AddPeriodic(ctx, p), leaserouter.ErrInvalidOptions)
	}
	var rows int
	require.NoError(t, db.QueryRow(ctx, "SELECT count(*) FROM leaserouter_periodic").Scan(&rows))
	require.Zero(t, rows, "nothing registered by a refused AddPeriodic")

	p := pgrouter.Periodic[int]{Name: "report", Schedule: every}
	//lint:ignore SA1012 a nil ctx is documented to mean context.Background()
	require.NoError(t, r.AddPeriodic(nil, p), "a nil ctx is context.Background()")
	err := r.AddPeriodic(ctx, p)
	require.ErrorIs(t, err, leaserouter.ErrInvalidOptions, "a name added already")
	require.ErrorContains(t, err, `"report" is already added on queue "default"`)
	other := routerOn[int](t, db, pgrouter.Options{Queue: "other"})
	require.NoError(t, other.AddPeriodic(ctx, p), "the same name on another queue")
}

// Which ticks a (re)started scheduler enqueues, on a schedule whose ticks
// lie 90 and 30 minutes before the database's clock and 30 minutes after
// it: none before the periodic job's first registration ever (a first
// start does not enqueue the latest past tick); after a restart (the
// first registration 2 hours ago), the latest missed tick if it is
// younger than Retention, once however many processes restart, and none
// older; none beyond Retention; none again for a tick whose job is gone
// (deleted, as a purge deletes it).
func TestPeriodicCatchUpAfterRestart(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := t.Context()
	now := dbNow(t, db)
	sched := shifted{base: now.Add(-90 * time.Minute), period: time.Hour}
	missed := now.Add(-30 * time.Minute) // the latest tick before now
	payload := func(tick time.Time) int { return int(tick.Unix()) }
	p := pgrouter.Periodic[int]{Name: "report", Schedule: sched, Payload: payload,
		Options: []leaserouter.EnqueueOption{leaserouter.WithPriority(7), leaserouter.WithMaxAttempts(2)}}
	startedAgo := func(queue string, ago time.Duration) {
		_, err := db.Exec(ctx, "INSERT INTO leaserouter_periodic (queue, name, since) VALUES ($1, $2, clock_timestamp() - $3::interval)",
			queue, p.Name, ago.String())
		require.NoError(t, err)
	}

	t.Run("FirstStartEnqueuesNoPastTick", func(t *testing.T) {
		r := routerOn[int](t, db, pgrouter.Options{Queue: "first", Retention: 2 * time.Hour})
		require.NoError(t, r.AddPeriodic(ctx, p))
		awaitWakes(t, r, 1)
		require.Empty(t, tickJobs(t, db, "first", p.Name))
		var since time.Time
		require.NoError(t, db.QueryRow(ctx, "SELECT since FROM leaserouter_periodic WHERE queue = 'first'").Scan(&since))
		require.WithinDuration(t, now, since, time.Minute, "since: the first registration, on the database's clock")
	})

	t.Run("LatestMissedTickOnce", func(t *testing.T) {
		startedAgo("restart", 2*time.Hour)
		var evs enqueuedEvents
		var rs []*pgrouter.Router[int]
		for range 3 { // three processes restarted
			r := routerOn[int](t, db, pgrouter.Options{Queue: "restart", Retention: time.Hour, OnEvent: evs.hook})
			require.NoError(t, r.AddPeriodic(ctx, p))
			rs = append(rs, r)
		}
		for _, r := range rs {
			awaitWakes(t, r, 1)
		}
		id := leaserouter.TickID(p.Name, missed)
		require.Equal(t, []string{id}, tickJobs(t, db, "restart", p.Name), "the latest missed tick only, not the one 90 minutes ago")
		j, ok, err := rs[0].Get(ctx, id)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, payload(missed), j.Payload)
		require.Equal(t, 7, j.Priority, "p.Options applied")
		require.Equal(t, 2, j.MaxAttempts, "p.Options applied")
		for _, r := range rs {
			require.NoError(t, r.Close(ctx)) // its events delivered
		}
		require.Equal(t, map[string]int{id: 1}, evs.get(), "one EventEnqueued over the three processes")

		// Its job gone (deleted, as a purge deletes it past Retention), a
		// process restarted once more does not enqueue the tick again.
		_, err = db.Exec(ctx, "DELETE FROM leaserouter_jobs WHERE queue = 'restart'")
		require.NoError(t, err)
		r := routerOn[int](t, db, pgrouter.Options{Queue: "restart", Retention: time.Hour})
		require.NoError(t, r.AddPeriodic(ctx, p))
		awaitWakes(t, r, 1)
		require.Empty(t, tickJobs(t, db, "restart", p.Name), "a tick taken is never taken again")
	})

	t.Run("NoneBeyondRetention", func(t *testing.T) {
		startedAgo("old", 2*time.Hour)
		r := routerOn[int](t, db, pgrouter.Options{Queue: "old", Retention: 20 * time.Minute})
		require.NoError(t, r.AddPeriodic(ctx, p))
		awaitWakes(t, r, 1)
		require.Empty(t, tickJobs(t, db, "old", p.Name), "the missed tick is 30 minutes old, Retention 20")
	})
}

// The statement that takes a tick decides on its own, on the database's
// clock, whatever the scheduler planned: it refuses a tick before the
// first registration, one not yet due, one older than the retention, and
// one taken before, but takes a tick never taken that is older than the
// last taken (deferred while another took a younger one); of
// two transactions taking the same tick, the second never waits for the
// first: it finds the row locked, and tried again takes it if the first
// rolled back (its process died), or finds it taken if the first
// committed. A taker deletes the records of the ticks older than its
// retention before its tick, and those ticks are refused for good.
func TestPeriodicTickTakenOnceByTheDatabase(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := t.Context()
	var since time.Time
	require.NoError(t, db.QueryRow(ctx, `INSERT INTO leaserouter_periodic (queue, name, since)
		VALUES ('q', 'p', clock_timestamp() - interval '2 minutes') RETURNING since`).Scan(&since))
	sql, names := pgrouter.Statement("periodic_tick")
	type result struct{ taken, locked bool }
	tryTake := func(q interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}, tick time.Time, retention time.Duration) (result, error) {
		var res result
		err := q.QueryRow(ctx, sql, bindPositional(names, map[string]any{"queue": "q", "name": "p", "tick": tick,
			"retention_us": retention.Microseconds(), "lock_timeout_ms": 1000, "idle_timeout_ms": 60000})...).Scan(&res.taken, &res.locked)
		return res, err
	}
	take := func(q interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}, tick time.Time) result {
		res, err := tryTake(q, tick, 10*time.Minute)
		require.NoError(t, err)
		return res
	}
	taken, none, locked := result{taken: true}, result{}, result{locked: true}
	now := dbNow(t, db)
	require.Equal(t, none, take(db, since.Add(-time.Second)), "a tick before since")
	require.Equal(t, none, take(db, now.Add(time.Minute)), "a tick not yet due")
	old, err := tryTake(db, now.Add(-time.Minute), 30*time.Second)
	require.NoError(t, err)
	require.Equal(t, none, old, "a tick older than the retention")
	require.Equal(t, taken, take(db, now.Add(-90*time.Second)))
	require.Equal(t, none, take(db, now.Add(-90*time.Second)), "the same tick again")
	require.Equal(t, taken, take(db, now.Add(-100*time.Second)), "a tick before the last taken, never taken")
	require.Equal(t, none, take(db, now.Add(-100*time.Second)), "that tick again")

	tick := now.Add(-time.Minute)
	first, err := db.Begin(ctx)
	require.NoError(t, err)
	require.Equal(t, taken, take(first, tick))
	require.Equal(t, locked, take(db, tick), "the second taker, while the first locks the row")
	require.NoError(t, first.Rollback(ctx), "the first taker dies before its commit")
	require.Equal(t, taken, take(db, tick), "the second takes the tick the first never committed")

	tick = dbNow(t, db).Add(-time.Second)
	first, err = db.Begin(ctx)
	require.NoError(t, err)
	require.Equal(t, taken, take(first, tick))
	require.Equal(t, locked, take(db, tick), "the second taker, while the first locks the row")
	require.NoError(t, first.Commit(ctx))
	require.Equal(t, none, take(db, tick), "the tick the first committed")

	pruner, err := tryTake(db, tick.Add(time.Millisecond), 30*time.Second)
	require.NoError(t, err)
	require.Equal(t, taken, pruner, "a tick whose taker's retention is 30s")
	var kept int
	require.NoError(t, db.QueryRow(ctx, "SELECT count(*) FROM leaserouter_periodic_ticks WHERE queue = 'q' AND name = 'p'").Scan(&kept))
	require.Equal(t, 2, kept, "the records of the ticks older than 30s before it deleted")
	require.Equal(t, none, take(db, now.Add(-95*time.Second)), "a tick never taken, older than a taker's retention before its tick")
	_, err = db.Exec(ctx, "DELETE FROM leaserouter_periodic")
	require.NoError(t, err)
	require.Equal(t, none, take(db, dbNow(t, db).Add(-time.Second)), "a job with no row: none to lock")
}

// The database's clock decides, never the process's: a Router whose
// clock is an hour ahead of the database's, and one whose clock is an
// hour behind, each alone on a queue, enqueue each tick of Every(1s)
// after their registration at its instant, with the IDs of the ticks
// of the database's clock, and wake up about once per tick (the timer is
// set from the measured offset: no spinning when ahead, no oversleeping
// when behind); together on one queue, each tick once.
func TestPeriodicTicksFollowTheDatabaseClock(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := t.Context()
	const name = "beat"
	p := pgrouter.Periodic[int]{Name: name, Schedule: leaserouter.Every(time.Second)}
	skewed := func(queue string, skew time.Duration) *pgrouter.Router[int] {
		r := routerOn[int](t, db, pgrouter.Options{Queue: queue})
		pgrouter.SetClockSkew(r, skew)
		return r
	}
	ahead, behind := skewed("ahead", time.Hour), skewed("behind", -time.Hour)
	bothA, bothB := skewed("both", time.Hour), skewed("both", -time.Hour)
	for _, r := range []*pgrouter.Router[int]{ahead, behind, bothA, bothB} {
		require.NoError(t, r.AddPeriodic(ctx, p))
	}
	var last time.Time // the latest first registration
	require.NoError(t, db.QueryRow(ctx, "SELECT max(since) FROM leaserouter_periodic").Scan(&last))
	const ticks = 3
	awaitDBTime(t, db, last.Truncate(time.Second).Add((ticks+1)*time.Second))
	end := dbNow(t, db)
	// About one wake-up per tick: the first at AddPeriodic, one per tick,
	// some woken early by a measured offset a little off; far from a spin
	// (thousands) or a poll.
	for _, r := range []*pgrouter.Router[int]{ahead, behind} {
		require.LessOrEqual(t, pgrouter.PeriodicWakes(r), uint64(3*(ticks+2)), "wake-ups")
	}
	for _, queue := range []string{"ahead", "behind", "both"} {
		var since time.Time
		require.NoError(t, db.QueryRow(ctx, "SELECT since FROM leaserouter_periodic WHERE queue = $1", queue).Scan(&since))
		// Every tick after since, up to a second before end (the last may
		// be on its way), has its job; none other.
		want := map[string]bool{}
		for tick := since.Truncate(time.Second).Add(time.Second); !tick.After(end.Add(-time.Second)); tick = tick.Add(time.Second) {
			want[leaserouter.TickID(name, tick)] = true
		}
		require.GreaterOrEqual(t, len(want), ticks, queue)
		got := tickJobs(t, db, queue, name)
		for _, id := range got {
			tick, err := time.Parse(time.RFC3339Nano, strings.TrimPrefix(id, name+"@"))
			require.NoError(t, err, id)
			require.True(t, !tick.Before(since) && !tick.After(end), "%s: tick %s outside [since %s, end %s]", queue, id, since, end)
			delete(want, id)
		}
		require.Empty(t, want, "%s: ticks without their job (got %v)", queue, got)
	}
}

// statementCounter counts, by statement text, the statements a pool runs.
type statementCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[data.SQL]++
	return ctx
}

func (c *statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *statementCounter) count(sql string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[sql]
}

// The scheduler sleeps until the next tick rather than polling: with two
// periodic jobs an hour apart from their next tick, it sends no statement
// of its own over 3 idle seconds (after the wake-up of its
// registrations); an Every(1s) added then wakes it about once a second.
func TestPeriodicSchedulerSleepsUntilTheTick(t *testing.T) {
	t.Parallel()
	base := pgtest.New(t)
	var counter statementCounter
	cfg := base.Config()
	cfg.ConnConfig.Tracer = &counter
	db, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(db.Close) // after the Router's Close (cleanups run last first)
	r := routerOn[int](t, db, pgrouter.Options{})
	ctx := t.Context()
	clock, _ := pgrouter.Statement("periodic_clock")
	tick, _ := pgrouter.Statement("periodic_tick")

	// One at a time, each planned by the wake-up its AddPeriodic kicked
	// off (the scheduler is asleep in between).
	require.NoError(t, r.AddPeriodic(ctx, pgrouter.Periodic[int]{Name: "hourly", Schedule: leaserouter.Every(time.Hour)}))
	awaitWakes(t, r, 1)
	require.NoError(t, r.AddPeriodic(ctx, pgrouter.Periodic[int]{Name: "half", Schedule: shifted{base: time.Now().Add(30 * time.Minute), period: time.Hour}}))
	awaitWakes(t, r, 2)
	before := counter.count(clock)
	idle := time.NewTimer(3 * time.Second) // real time: the behaviour is about real scheduling
	<-idle.C
	require.Equal(t, before, counter.count(clock), "clock reads over 3 idle seconds")
	require.Zero(t, counter.count(tick), "ticks taken")

	require.NoError(t, r.AddPeriodic(ctx, pgrouter.Periodic[int]{Name: "beat", Schedule: leaserouter.Every(time.Second)}))
	from, wakes := dbNow(t, base), pgrouter.PeriodicWakes(r)
	awaitDBTime(t, base, from.Add(3*time.Second))
	n := pgrouter.PeriodicWakes(r) - wakes
	require.GreaterOrEqual(t, n, uint64(2), "wake-ups in 3s of Every(1s)")
	require.LessOrEqual(t, n, uint64(9), "wake-ups in 3s of Every(1s)")
}

// TestPeriodicCloseBoundedByItsCtx: Close waits for a Payload call in
// progress only until its ctx is done; with no lease to drain it then
// returns nil, as the core's does (draining makes the result); the
// scheduler goroutine ends when the call returns.
func TestPeriodicCloseBoundedByItsCtx(t *testing.T) {
	t.Parallel()
	r, _ := newRouter[int](t, pgrouter.Options{})
	ctx := t.Context()
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	require.NoError(t, r.AddPeriodic(ctx, pgrouter.Periodic[int]{Name: "stuck", Schedule: leaserouter.Every(time.Second),
		Payload: func(time.Time) int {
			once.Do(func() { close(entered) })
			<-release
			return 1
		}}))
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("no Payload call within 10s of Every(1s)")
	}
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	closed := make(chan error, 1)
	go func() { closed <- r.Close(cctx) }()
	select {
	case err := <-closed:
		require.NoError(t, err, "no lease to drain: ctx cut short only the wait for Payload")
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal("Close waited past its ctx for a Payload call")
	}
	close(release)
}

// logRecords is a slog.Handler's output, safe for concurrent use.
type logRecords struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logRecords) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(b)
}

func (l *logRecords) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.buf.String(), s)
}

// A database error does not end the scheduler: it tries again after a
// backoff (100ms doubling, a few tries a second, not a spin), reporting
// each failure at level Warn through the Logger, and enqueues the ticks
// again once the database answers.
func TestPeriodicRetriesAfterDatabaseErrors(t *testing.T) {
	t.Parallel()
	var logs logRecords
	r, db := newRouter[int](t, pgrouter.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	ctx := t.Context()
	require.NoError(t, r.AddPeriodic(ctx, pgrouter.Periodic[int]{Name: "beat", Schedule: leaserouter.Every(time.Second)}))
	eventually(t, 10*time.Second, "a first tick's job", func() bool { return len(tickJobs(t, db, "default", "beat")) > 0 })

	_, err := db.Exec(ctx, "ALTER TABLE leaserouter_periodic RENAME TO leaserouter_periodic_away")
	require.NoError(t, err)
	const failed = `level=WARN msg="pgrouter: periodic jobs: ERROR: relation \"leaserouter_periodic\" does not exist`
	eventually(t, 10*time.Second, "a failed tick reported", func() bool { return logs.count(failed) > 0 })
	from := dbNow(t, db)
	awaitDBTime(t, db, from.Add(2*time.Second))
	n := logs.count(failed)
	require.LessOrEqual(t, n, 12, "failures reported in ~2s: a backoff, not a spin")
	_, err = db.Exec(ctx, "ALTER TABLE leaserouter_periodic_away RENAME TO leaserouter_periodic")
	require.NoError(t, err)
	back := dbNow(t, db)
	eventually(t, 10*time.Second, "a tick's job once the table is back", func() bool {
		var k int
		require.NoError(t, db.QueryRow(ctx, "SELECT count(*) FROM leaserouter_jobs WHERE starts_with(id, 'beat@') AND created_at > $1", back).Scan(&k))
		return k > 0
	})
}

// TestPeriodicFailingTickDoesNotStarveOthers: one periodic job whose tick
// the database refuses every time (its payload is JSON that jsonb does not
// take: a lone surrogate escape) must not stop this Router's other
// periodic jobs: each is scheduled on its own.
func TestPeriodicFailingTickDoesNotStarveOthers(t *testing.T) {
	t.Parallel()
	r, db := newRouter[json.RawMessage](t, pgrouter.Options{})
	ctx := t.Context()
	require.NoError(t, r.AddPeriodic(ctx, pgrouter.Periodic[json.RawMessage]{Name: "bad", Schedule: leaserouter.Every(time.Second),
		Payload: func(time.Time) json.RawMessage { return json.RawMessage(`"\ud800"`) }}))
	require.NoError(t, r.AddPeriodic(ctx, pgrouter.Periodic[json.RawMessage]{Name: "good", Schedule: leaserouter.Every(time.Second),
		Payload: func(time.Time) json.RawMessage { return json.RawMessage(`1`) }}))
	from := dbNow(t, db)
	awaitDBTime(t, db, from.Add(4*time.Second))
	// Ticks at 1s: at least three of the four whole seconds lived across,
	// asserted generously (the bug leaves at most one).
	require.GreaterOrEqual(t, len(tickJobs(t, db, "default", "good")), 3, "ticks of the healthy periodic job")
	require.Empty(t, tickJobs(t, db, "default", "bad"))
}
