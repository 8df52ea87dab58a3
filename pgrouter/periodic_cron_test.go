package pgrouter_test

import (
	"testing"
	"time"

	"github.com/robfig/cron/v3"
	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
)

// robfig/cron/v3's parsed schedules are leaserouter.Schedules as they
// are: no adapter, no cron parser of our own.
var _ leaserouter.Schedule = cron.Schedule(nil)

// TestPeriodicOnACronSchedule: a robfig/cron schedule with a time zone
// (CRON_TZ) drives AddPeriodic: one job per second's tick, each with the
// ID TickID gives its instant (in UTC, whatever the schedule's zone), one
// second apart, its payload Payload(tick).
func TestPeriodicOnACronSchedule(t *testing.T) {
	t.Parallel()
	sched, err := cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor).
		Parse("CRON_TZ=Asia/Kolkata * * * * * *") // every second, in a zone 5h30 off UTC
	require.NoError(t, err)
	r, db := newRouter[string](t, pgrouter.Options{})
	ctx := t.Context()
	require.NoError(t, r.AddPeriodic(ctx, pgrouter.Periodic[string]{Name: "cron", Schedule: sched,
		Payload: func(tick time.Time) string { return tick.Format(time.RFC3339Nano) }}))
	var ids, payloads []string
	eventually(t, 20*time.Second, "three ticks of the cron schedule", func() bool {
		ids, payloads = ids[:0], payloads[:0]
		rows, err := db.Query(ctx, "SELECT id, payload #>> '{}' FROM leaserouter_jobs WHERE id LIKE 'cron@%' ORDER BY id")
		require.NoError(t, err)
		defer rows.Close()
		for rows.Next() {
			var id, payload string
			require.NoError(t, rows.Scan(&id, &payload))
			ids, payloads = append(ids, id), append(payloads, payload)
		}
		require.NoError(t, rows.Err())
		return len(ids) >= 3
	})
	var prev time.Time
	for i, id := range ids {
		tick, err := time.Parse(time.RFC3339Nano, payloads[i])
		require.NoError(t, err)
		require.Equal(t, leaserouter.TickID("cron", tick), id)
		require.Contains(t, id, "Z", "the ID is in UTC")
		require.Zero(t, tick.Nanosecond(), "a cron tick is on a whole second")
		if i > 0 {
			require.Equal(t, time.Second, tick.Sub(prev), "one job per tick")
		}
		prev = tick
	}
}
