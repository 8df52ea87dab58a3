package periodic

import (
	"errors"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// stepped hides the interval: Due must step through Next.
type stepped struct {
	s     Schedule
	calls int
}

func (s *stepped) Next(t time.Time) time.Time {
	s.calls++
	return s.s.Next(t)
}

var base = time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)

// TestDueFastPathMatchesStepping: for an Every schedule, the plan computed
// at once from the interval is the one stepping through Next gives, tick,
// skipped count, handled and next wake-up alike, over random starts,
// handled ticks, instants and retentions.
func TestDueFastPathMatchesStepping(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	enqueued := 0
	for range 20_000 {
		d := time.Duration(1+rng.IntN(5000)) * time.Millisecond
		since := base.Add(time.Duration(rng.Int64N(int64(time.Hour))))
		now := since.Add(time.Duration(rng.Int64N(int64(100 * d))))
		ret := time.Duration(1 + rng.Int64N(int64(50*d)))
		var last time.Time
		if rng.IntN(2) == 0 {
			if l := Every(d).Next(since.Add(time.Duration(rng.Int64N(int64(now.Sub(since)) + 1)))); !l.After(now) {
				last = l.Add(-d)
			}
		}
		fast, err := Due(Every(d), since, last, now, ret)
		require.NoError(t, err)
		slow, err := Due(&stepped{s: Every(d)}, since, last, now, ret)
		require.NoError(t, err)
		require.Equal(t, slow, fast, "d=%v since=%v last=%v now=%v ret=%v", d, since, last, now, ret)
		if !fast.Tick.IsZero() {
			enqueued++
		}
	}
	require.Greater(t, enqueued, 1000, "the cases include due ticks")
}

// TestDueRetentionBoundary: the latest due tick is enqueued while now <
// tick+retention; at now == tick+retention it is not.
func TestDueRetentionBoundary(t *testing.T) {
	s, since, ret := Every(time.Minute), base.Add(-time.Hour), 10*time.Second
	tick := base
	for _, sch := range []Schedule{s, &stepped{s: s}} {
		p, err := Due(sch, since, tick.Add(-time.Minute), tick.Add(ret-1), ret)
		require.NoError(t, err)
		require.Equal(t, tick, p.Tick)
		require.Equal(t, tick, p.Handled)
		require.Equal(t, tick.Add(time.Minute), p.Next)

		p, err = Due(sch, since, tick.Add(-time.Minute), tick.Add(ret), ret)
		require.NoError(t, err)
		require.True(t, p.Tick.IsZero(), "a tick exactly the retention old: %v", p.Tick)
		require.Equal(t, tick.Add(time.Minute), p.Next)
	}
}

// TestDueSinceIsTick: a scheduler started at a tick's instant enqueues
// that tick; one started just after it does not, and waits for the next.
func TestDueSinceIsTick(t *testing.T) {
	s := Every(time.Minute)
	for _, sch := range []Schedule{s, &stepped{s: s}} {
		p, err := Due(sch, base, time.Time{}, base, time.Hour)
		require.NoError(t, err)
		require.Equal(t, Plan{Tick: base, Handled: base, Next: base.Add(time.Minute)}, p)

		p, err = Due(sch, base.Add(1), time.Time{}, base.Add(time.Second), time.Hour)
		require.NoError(t, err)
		require.Equal(t, Plan{Next: base.Add(time.Minute)}, p, "the tick before since is not enqueued")
	}
}

// TestDueLatestOnly: after a pause, the latest due tick is enqueued and the
// older ones are counted skipped, never enqueued; the last one handled is
// not enqueued again.
func TestDueLatestOnly(t *testing.T) {
	s := Every(time.Second)
	for _, sch := range []Schedule{s, &stepped{s: s}} {
		p, err := Due(sch, base, base, base.Add(10*time.Second+time.Millisecond), time.Hour)
		require.NoError(t, err)
		require.Equal(t, Plan{Tick: base.Add(10 * time.Second), Skipped: 9, Handled: base.Add(10 * time.Second), Next: base.Add(11 * time.Second)}, p)

		p, err = Due(sch, base, p.Handled, base.Add(10*time.Second+2*time.Millisecond), time.Hour)
		require.NoError(t, err)
		require.Equal(t, Plan{Handled: base.Add(10 * time.Second), Next: base.Add(11 * time.Second)}, p)
	}
}

// TestDueMaxStepsSplits: a stepped schedule with more ticks than maxSteps in
// the retention's window is planned over several wake-ups, each calling
// Next at most maxSteps+2 times and asking to go again at once, until the
// last, which enqueues the latest tick, and only it.
func TestDueMaxStepsSplits(t *testing.T) {
	const n = 3*maxSteps + 5
	sch := &stepped{s: Every(time.Microsecond)}
	since := base
	now := since.Add(n * time.Microsecond)
	var last time.Time
	var ticks []time.Time
	wakes, skipped := 0, 0
	for {
		sch.calls = 0
		p, err := Due(sch, since, last, now, time.Hour)
		require.NoError(t, err)
		require.LessOrEqual(t, sch.calls, maxSteps+2)
		wakes++
		skipped += p.Skipped
		last = p.Handled
		if !p.Tick.IsZero() {
			ticks = append(ticks, p.Tick)
		}
		if p.Next.After(now) {
			break
		}
		require.True(t, p.Tick.IsZero(), "no tick before the end of the split")
		require.Less(t, wakes, 10)
	}
	require.Equal(t, 4, wakes)
	require.Equal(t, []time.Time{now}, ticks)
	require.Equal(t, n, skipped, "every tick but the latest is skipped (n+1 ticks from since to now)")
}

// TestDueScheduleEnds: a Next returning zero ends the schedule (Next zero),
// after the due tick if any.
func TestDueScheduleEnds(t *testing.T) {
	once := nextFunc(func(t time.Time) time.Time {
		if t.Before(base) {
			return base
		}
		return time.Time{}
	})
	p, err := Due(once, base.Add(-time.Hour), time.Time{}, base.Add(time.Second), time.Hour)
	require.NoError(t, err)
	require.Equal(t, Plan{Tick: base, Handled: base}, p)
	p, err = Due(once, base.Add(-time.Hour), base, base.Add(2*time.Second), time.Hour)
	require.NoError(t, err)
	require.Equal(t, Plan{Handled: base}, p)
}

type nextFunc func(time.Time) time.Time

func (f nextFunc) Next(t time.Time) time.Time { return f(t) }

// TestDueStuckOrPanickingNext: a Next that does not move forward gives
// ErrStuck, one that panics an error saying so; the plan is zero.
func TestDueStuckOrPanickingNext(t *testing.T) {
	stuck := nextFunc(func(t time.Time) time.Time { return t })
	p, err := Due(stuck, base, time.Time{}, base.Add(time.Second), time.Hour)
	require.ErrorIs(t, err, ErrStuck)
	require.Equal(t, Plan{}, p)

	back := nextFunc(func(t time.Time) time.Time { return t.Add(-time.Second) })
	_, err = Due(back, base, time.Time{}, base.Add(time.Second), time.Hour)
	require.ErrorIs(t, err, ErrStuck)

	boom := nextFunc(func(time.Time) time.Time { panic("boom") })
	p, err = Due(boom, base, time.Time{}, base.Add(time.Second), time.Hour)
	require.Error(t, err)
	require.False(t, errors.Is(err, ErrStuck))
	require.EqualError(t, err, "schedule's Next panicked: boom")
	require.Equal(t, Plan{}, p)

	// A stuck Next after a due tick, while looking for the next one.
	late := nextFunc(func(t time.Time) time.Time {
		if t.Before(base) {
			return base
		}
		return t
	})
	_, err = Due(late, base.Add(-time.Hour), time.Time{}, base.Add(time.Second), time.Hour)
	require.ErrorIs(t, err, ErrStuck)
}

// TestEveryAlignedToTheEpoch: Every's next tick after t is the first
// whole multiple of the interval since the Unix epoch after t, exactly,
// for intervals that do not divide a second or a day, before 1970 and far
// from it (checked in big integers), and has no monotonic reading.
func TestEveryAlignedToTheEpoch(t *testing.T) {
	nanos := func(x time.Time) *big.Int {
		n := new(big.Int).Mul(big.NewInt(x.Unix()), big.NewInt(1e9))
		return n.Add(n, big.NewInt(int64(x.Nanosecond())))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, d := range []time.Duration{13, 7 * time.Second, time.Hour, 36 * time.Hour, 1e18} {
		for range 1000 {
			at := time.Unix(rng.Int64N(1<<40)-1<<39, rng.Int64N(1e9)).Add(time.Second) // about +-17,000 years around 1970
			n := Every(d).Next(at)
			require.True(t, n.After(at), "Every(%v).Next(%v) = %v", d, at, n)
			require.LessOrEqual(t, n.Sub(at), d)
			rem := new(big.Int).Mod(nanos(n), big.NewInt(int64(d)))
			require.Zero(t, rem.Sign(), "Every(%v).Next(%v) = %v is not a multiple since the epoch", d, at, n)
			require.Equal(t, n, n.Round(0), "no monotonic reading")
		}
	}
	require.True(t, Every(0).Next(time.Now()).IsZero(), "no ticks for an interval <= 0")
	require.True(t, Every(-time.Second).Next(time.Now()).IsZero())
}
