package pgrouter_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
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

// Periodic jobs across processes SIGKILLed and restarted at random: a
// scheduler process of TestPeriodicOneJobPerTickAcrossKilledProcesses
// (periodicChild) is this test binary run again with envPeriodicChild set.
const (
	envPeriodicChild = "LEASEROUTER_PERIODIC_CHILD" // the database's connection string
	envPeriodicAlign = "LEASEROUTER_PERIODIC_ALIGN" // "1": register just after a tick (see periodicKillPlan)
	envPeriodicSeed  = "LEASEROUTER_PERIODIC_SEED"  // replays a kill schedule

	periodicQueue     = "ticks"
	periodicName      = "beat"
	periodicRetention = 6 * time.Second // finished tick jobs are purged during the run
)

// periodicChild is a scheduler process: a Router on periodicQueue that
// schedules periodicName Every(1s) and runs a worker completing its jobs.
// It writes lines on stdout: "pre <instant>" and "reg <instant>", the
// database's clock just before AddPeriodic and just after it returned,
// then "enq <id>" for each job it enqueued (EventEnqueued). It runs until
// it is killed, or exits at its stdin's end (the parent gone).
func periodicChild(dsn string) int {
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(3)
	}()
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "periodic child:", err)
		return 1
	}
	ctx := context.Background()
	db, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return fail(err)
	}
	var mu sync.Mutex
	say := func(format string, a ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf(format+"\n", a...)
	}
	r, err := pgrouter.New[int64](ctx, db, pgrouter.Options{Queue: periodicQueue, Retention: periodicRetention,
		OnEvent: func(ev leaserouter.Event) {
			if ev.Kind == leaserouter.EventEnqueued {
				say("enq %s", ev.JobID)
			}
		}})
	if err != nil {
		return fail(err)
	}
	clock := func() (time.Time, error) {
		var now time.Time
		return now, db.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&now)
	}
	if os.Getenv(envPeriodicAlign) != "" {
		// 100ms after the database's next whole second: the tick just
		// passed then is one no process lived across (periodicKillPlan).
		now, err := clock()
		if err != nil {
			return fail(err)
		}
		<-time.NewTimer(now.Truncate(time.Second).Add(time.Second + 100*time.Millisecond).Sub(now)).C
	}
	pre, err := clock()
	if err != nil {
		return fail(err)
	}
	say("pre %s", pre.Format(time.RFC3339Nano))
	err = r.AddPeriodic(ctx, pgrouter.Periodic[int64]{Name: periodicName, Schedule: leaserouter.Every(time.Second),
		Payload: func(tick time.Time) int64 { return tick.Unix() }})
	if err != nil {
		return fail(err)
	}
	reg, err := clock()
	if err != nil {
		return fail(err)
	}
	say("reg %s", reg.Format(time.RFC3339Nano))
	err = r.Run(ctx, leaserouter.WorkerOptions{Workers: 2}, func(context.Context, *pgrouter.Lease[int64]) error { return nil })
	return fail(fmt.Errorf("Run returned: %v", err))
}

// procStep is a step of a kill schedule: at (since the run's start) start
// a process in slot, or SIGKILL the one running there.
type procStep struct {
	at    time.Duration
	slot  int
	start bool
	align bool // a start that registers just after a tick (envPeriodicAlign)
}

// The kill schedule's shape: periodicSlots processes for periodicRun,
// each living 2-10s and down 0.3-3s between lives, except in
// periodicWindows windows of 3s where all are down together: every slot
// alive is killed at the window's start; slot 0 starts again at its end,
// registering 100ms after the next tick of the database's clock, and the
// others 2-3.5s after it. The tick before slot 0's registration is one no
// process lived across (the last kill was 3s before at least), the
// latest missed one: slot 0 catches it up.
const (
	periodicSlots   = 5
	periodicRun     = 78 * time.Second
	periodicWindows = 3
	periodicWindow  = 3 * time.Second
)

// periodicKillPlan draws a kill schedule from rng, in time order.
func periodicKillPlan(rng *rand.Rand) []procStep {
	between := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo))) }
	type window struct{ start, end time.Duration }
	var windows []window
	for i := range periodicWindows {
		s := time.Duration(i+1)*periodicRun/(periodicWindows+1) + between(-2*time.Second, 2*time.Second)
		windows = append(windows, window{s, s + periodicWindow})
	}
	var steps []procStep
	for slot := range periodicSlots {
		for at := between(0, 500*time.Millisecond); at < periodicRun; {
			align := slot == 0 && slices.ContainsFunc(windows, func(w window) bool { return at == w.end })
			steps = append(steps, procStep{at: at, slot: slot, start: true, align: align})
			end := at + between(2*time.Second, 10*time.Second)
			for _, w := range windows {
				if at < w.start && end >= w.start {
					end = w.start // all down together
				}
			}
			if end >= periodicRun {
				steps = append(steps, procStep{at: periodicRun, slot: slot})
				break
			}
			steps = append(steps, procStep{at: end, slot: slot})
			at = end + between(300*time.Millisecond, 3*time.Second)
			for _, w := range windows {
				// No start in a window, nor just before it; after it, slot 0
				// first, the others once slot 0 has caught up.
				if at >= w.start-time.Second && at < w.end+2*time.Second {
					at = w.end + between(2*time.Second, 3500*time.Millisecond)
					if slot == 0 {
						at = w.end
					}
				}
			}
		}
	}
	slices.SortStableFunc(steps, func(a, b procStep) int { return int(a.at - b.at) })
	return steps
}

// schedulerLife is one process's life as the test saw it.
type schedulerLife struct {
	slot      int
	pre, reg  time.Time // AddPeriodic's call and return, database clock; zero if not reached
	killed    time.Time // the database's clock just before the SIGKILL
	enqueued  []string
	unexpects []string
}

// The strong exactly-once check: 5 processes schedule the same periodic
// job Every(1s) for 78s, each SIGKILLed and started again at random (a
// seeded schedule, logged on failure), all down together 3 times; the
// jobs finish and are purged after 6s (Retention), which a second enqueue
// of a tick would expose. Over the whole run, every tick was enqueued at
// most once (the processes' EventEnqueued, and a trigger recording every
// insert of the queue's jobs, which sees even the enqueues of a process
// killed before it reported them); every tick a process lived across
// (registered 1.5s before, killed 1.5s after) has its job; no tick before
// the first registration ever has one; a tick no process lived across
// (all down) was caught up by a restart, and only the latest of those
// missed in a row.
func TestPeriodicOneJobPerTickAcrossKilledProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("78s of real time")
	}
	t.Parallel()
	db := pgtest.New(t)
	ctx := t.Context()
	_, err := db.Exec(ctx, `CREATE TABLE periodic_audit (id text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp());
		CREATE FUNCTION periodic_audit() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.queue = '`+periodicQueue+`' AND (TG_OP = 'INSERT' OR NEW.seq <> OLD.seq) THEN -- a job inserted, or replacing a purged one
				INSERT INTO periodic_audit (id) VALUES (NEW.id);
			END IF;
			RETURN NULL;
		END $$;
		CREATE TRIGGER periodic_audit AFTER INSERT OR UPDATE ON leaserouter_jobs FOR EACH ROW EXECUTE FUNCTION periodic_audit()`)
	require.NoError(t, err)

	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(envPeriodicSeed); s != "" {
		seed, err = strconv.ParseUint(s, 10, 64)
		require.NoError(t, err)
	}
	plan := periodicKillPlan(rand.New(rand.NewPCG(seed, seed)))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kill schedule seed %d (replay: %s=%d): %+v", seed, envPeriodicSeed, seed, plan)
		}
	})

	lives := runKillPlan(t, db, plan)
	for _, l := range lives {
		require.Empty(t, l.unexpects, "slot %d: lines it should not have written", l.slot)
	}

	// At most once: in the processes' reports, and in the trigger's record.
	logged := map[string]int{}
	for _, l := range lives {
		for _, id := range l.enqueued {
			logged[id]++
		}
	}
	rows, err := db.Query(ctx, "SELECT id, count(*)::int FROM periodic_audit GROUP BY id")
	require.NoError(t, err)
	inserted := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		require.NoError(t, rows.Scan(&id, &n))
		inserted[id] = n
	}
	require.NoError(t, rows.Err())
	for id, n := range logged {
		require.Equal(t, 1, n, "tick %s: enqueued by %d processes' reports", id, n)
		require.Contains(t, inserted, id, "a reported enqueue the trigger did not see")
	}
	ticks := map[int64]bool{} // by UnixNano: time.Time keys would differ by Location
	for id, n := range inserted {
		require.Equal(t, 1, n, "tick %s: inserted %d times", id, n)
		tick, err := time.Parse(time.RFC3339Nano, strings.TrimPrefix(id, periodicName+"@"))
		require.NoError(t, err, id)
		ticks[tick.UnixNano()] = true
	}

	// None before since, the first registration ever.
	var since time.Time
	require.NoError(t, db.QueryRow(ctx, "SELECT since FROM leaserouter_periodic WHERE queue = $1 AND name = $2",
		periodicQueue, periodicName).Scan(&since))
	var last time.Time // the last kill
	for _, l := range lives {
		if l.killed.After(last) {
			last = l.killed
		}
	}
	for tick := range ticks {
		require.False(t, time.Unix(0, tick).Before(since), "tick %s before the first registration %s", time.Unix(0, tick), since)
	}

	// Each tick a scheduler lived across has its job. Of a run of ticks
	// no scheduler was alive at, only the last may have one: a restart
	// catches up the latest missed tick, not a backlog; count those.
	const slack = 1500 * time.Millisecond
	covered, caughtUp := 0, 0
	var dead []time.Time // the current run of ticks no scheduler was alive at
	endDeadRun := func() {
		for _, tick := range dead[:max(len(dead)-1, 0)] {
			require.False(t, ticks[tick.UnixNano()], "tick %s caught up, though a later one (%s) was missed too",
				tick.Format(time.RFC3339), dead[len(dead)-1].Format(time.RFC3339))
		}
		dead = dead[:0]
	}
	for tick := since.Truncate(time.Second).Add(time.Second); tick.Before(last); tick = tick.Add(time.Second) {
		lived, alive := false, false
		for _, l := range lives {
			if l.pre.IsZero() {
				continue // never a scheduler
			}
			lived = lived || (!l.reg.IsZero() && l.reg.Before(tick.Add(-slack)) && l.killed.After(tick.Add(slack)))
			alive = alive || (!l.pre.After(tick) && !l.killed.Before(tick.Add(-500*time.Millisecond)))
		}
		if lived {
			covered++
			if !ticks[tick.UnixNano()] {
				for _, l := range lives {
					if !l.pre.IsZero() && l.pre.Before(tick.Add(3*time.Second)) && l.killed.After(tick.Add(-3*time.Second)) {
						t.Logf("slot %d: pre %s reg %s killed %s enqueued %v", l.slot, l.pre.Format(time.RFC3339Nano),
							l.reg.Format(time.RFC3339Nano), l.killed.Format(time.RFC3339Nano), l.enqueued)
					}
				}
				rows, err := db.Query(ctx, "SELECT id || ' at ' || at::text FROM periodic_audit WHERE at BETWEEN $1 AND $2 ORDER BY at",
					tick.Add(-3*time.Second), tick.Add(3*time.Second))
				require.NoError(t, err)
				near, err := pgx.CollectRows(rows, pgx.RowTo[string])
				require.NoError(t, err)
				t.Fatalf("tick %s: a scheduler lived across it, yet no job; inserted near it: %v", tick.Format(time.RFC3339), near)
			}
		}
		if alive {
			endDeadRun()
			continue
		}
		dead = append(dead, tick)
		if ticks[tick.UnixNano()] {
			caughtUp++
		}
	}
	endDeadRun()
	t.Logf("%d processes, %d ticks enqueued (%d reported), %d lived across, %d caught up after all were down",
		len(lives), len(ticks), len(logged), covered, caughtUp)
	require.GreaterOrEqual(t, len(ticks), 60, "ticks enqueued")
	var left int
	require.NoError(t, db.QueryRow(ctx, "SELECT count(*) FROM leaserouter_jobs WHERE queue = $1", periodicQueue).Scan(&left))
	require.Less(t, left, len(ticks)/2, "tick jobs left: most were finished and purged during the run")
	require.GreaterOrEqual(t, covered, 30, "ticks lived across (1.5s each side)")
	require.GreaterOrEqual(t, caughtUp, 1, "ticks caught up by a restart after all were down")
}

// runKillPlan runs plan's steps in real time, each process a
// periodicChild on db, and returns every process's life once all are
// killed.
func runKillPlan(t *testing.T, db *pgxpool.Pool, plan []procStep) []*schedulerLife {
	t.Helper()
	type running struct {
		c    *child
		life *schedulerLife
		read chan struct{} // closed once its stdout is read to the end
	}
	current := map[int]*running{}
	var lives []*schedulerLife
	kill := func(p *running) {
		p.life.killed = dbNow(t, db)
		select {
		case <-p.c.exited:
			t.Errorf("slot %d: exited before its kill: %v", p.life.slot, p.c.err)
		default:
		}
		_ = p.c.cmd.Process.Kill()
		<-p.c.exited
		<-p.read // what it wrote before it died
		_ = p.c.stdin.Close()
		_ = p.c.rd.Close()
	}
	defer func() {
		for _, p := range current {
			kill(p)
		}
	}()
	begin := time.Now()
	for _, st := range plan {
		if d := time.Until(begin.Add(st.at)); d > 0 {
			<-time.NewTimer(d).C // real time: the kill schedule is about real scheduling
		}
		if !st.start {
			kill(current[st.slot])
			delete(current, st.slot)
			continue
		}
		env := []string{envPeriodicChild + "=" + childDSN(db)}
		if st.align {
			env = append(env, envPeriodicAlign+"=1")
		}
		c, err := startChild(t.Context(), env...)
		require.NoError(t, err)
		p := &running{c: c, life: &schedulerLife{slot: st.slot}, read: make(chan struct{})}
		current[st.slot] = p
		lives = append(lives, p.life)
		go func() {
			defer close(p.read)
			for c.out.Scan() {
				kind, arg, _ := strings.Cut(c.out.Text(), " ")
				var err error
				switch kind {
				case "pre":
					p.life.pre, err = time.Parse(time.RFC3339Nano, arg)
				case "reg":
					p.life.reg, err = time.Parse(time.RFC3339Nano, arg)
				case "enq":
					p.life.enqueued = append(p.life.enqueued, arg)
				default:
					p.life.unexpects = append(p.life.unexpects, c.out.Text())
				}
				if err != nil {
					p.life.unexpects = append(p.life.unexpects, c.out.Text())
				}
			}
		}()
	}
	for slot, p := range current {
		kill(p)
		delete(current, slot)
	}
	return lives
}
