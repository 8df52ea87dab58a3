package leaserouter

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"runtime/trace"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leaserouter/leaserouter/internal/goid"
	"github.com/leaserouter/leaserouter/internal/hook"
)

// BenchmarkKeepAliveSoak is a soak of every fault at once around leases a
// KeepAlive keeps, to measure how late their heartbeats land. A Router
// with 40 ms leases, an OnEvent and a Logger, and a Retention of a second
// serves: producers enqueueing one at a time and in batches (delays,
// priorities) against a Capacity; workers that lease one to sixteen jobs
// at a time and crash (abandon them), stall past the expiry then complete
// (refused), heartbeat, complete, fail, fail permanently, release and
// cancel; a "process" that now and then leases a few thousand jobs at once
// and crashes (a mass expiry 40 ms later); a Run with four workers whose
// handlers return at once, sleep past a heartbeat, fail or panic; and
// eight holders that lease a job, keep it with KeepAlive (interval
// LeaseDuration/3) for 40-200 ms and complete it. A plain 1 ms
// time.Ticker in the same process is the control for scheduling lag. The
// run ends once LEASEROUTER_SOAK_LEASES leases (default 1,000,000) were
// granted; run it with -benchtime 1x.
//
// It reports each KeepAlive heartbeat's latency, from the instant it was
// due to the instant Heartbeat returned (beat-max-ms, beat-p9999-us,
// beat-p99-us), and its parts: the timer's lag (timer-max-ms), the time
// waiting for the router's lock (lockwait-max-ms) and the time from the
// lock to the return (incall-max-ms); the most due items the beat settled
// itself (settled-max); the control ticker's lag (tick-max-ms,
// tick-p9999-us); from the event stream, the gap between the instants a
// kept lease was granted or extended (kept-gap-max-ms, kept-gap-p9999-us:
// 40 ms or more loses it); and the leases the KeepAlives lost to an
// expiry (kept-lost) out of those they kept (kept), and of those the ones
// the ticker saw no lag over a millisecond for during the lease before
// (kept-lost-quiet). The quiet- figures are the beats' whose window the
// ticker saw no such lag in. kept-margin-min-ms and kept-margin-p0001-us
// are the least lease left when a kept lease was extended, and its
// 0.01th percentile, over every extension after a lease's first. It logs the slowest beats, and the slowest
// quiet ones, with what each waited behind. Run with -trace, it logs each
// beat more than 5 ms late (runtime/trace "late-beat") so that the trace
// shows what ran on each P meanwhile.
//
//	LEASEROUTER_SOAK_LEASES=1000000 go test -run XXX -bench KeepAliveSoak -benchtime 1x .
func BenchmarkKeepAliveSoak(b *testing.B) {
	target := 1_000_000
	if v, err := strconv.Atoi(os.Getenv("LEASEROUTER_SOAK_LEASES")); err == nil && v > 0 {
		target = v
	}
	var s *soakStats
	for b.Loop() {
		s = keepAliveSoak(b, target)
	}
	ms := func(d time.Duration) float64 { return d.Seconds() * 1e3 }
	us := func(d time.Duration) float64 { return float64(d.Microseconds()) }
	b.ReportMetric(ms(s.router.max), "call-max-ms")
	b.ReportMetric(us(s.router.quantile(0.9999)), "call-p9999-us")
	b.ReportMetric(ms(s.margin.min()), "kept-margin-min-ms")
	b.ReportMetric(us(s.margin.quantile(0.0001)), "kept-margin-p0001-us")
	b.ReportMetric(ms(s.gap.max), "kept-gap-max-ms")
	b.ReportMetric(us(s.gap.quantile(0.9999)), "kept-gap-p9999-us")
	b.ReportMetric(ms(s.quiet.max), "quiet-beat-max-ms")
	b.ReportMetric(us(s.quiet.quantile(0.9999)), "quiet-beat-p9999-us")
	b.ReportMetric(us(s.quiet.quantile(0.99)), "quiet-beat-p99-us")
	b.ReportMetric(ms(s.quietCall.max), "quiet-call-max-ms")
	b.ReportMetric(float64(s.quiet.n), "quiet-beats")
	b.ReportMetric(float64(s.lostQuiet), "kept-lost-quiet")
	b.ReportMetric(ms(s.beat.max), "beat-max-ms")
	b.ReportMetric(us(s.beat.quantile(0.9999)), "beat-p9999-us")
	b.ReportMetric(us(s.beat.quantile(0.99)), "beat-p99-us")
	b.ReportMetric(ms(s.timer.max), "timer-max-ms")
	b.ReportMetric(us(s.timer.quantile(0.99)), "timer-p99-us")
	b.ReportMetric(us(s.lockWait.quantile(0.99)), "lockwait-p99-us")
	b.ReportMetric(us(s.inCall.quantile(0.99)), "incall-p99-us")
	b.ReportMetric(us(s.tick.quantile(0.99)), "tick-p99-us")
	b.ReportMetric(ms(s.lockWait.max), "lockwait-max-ms")
	b.ReportMetric(us(s.lockWait.quantile(0.9999)), "lockwait-p9999-us")
	b.ReportMetric(ms(s.inCall.max), "incall-max-ms")
	b.ReportMetric(us(s.inCall.quantile(0.9999)), "incall-p9999-us")
	b.ReportMetric(float64(s.settledMax), "settled-max")
	b.ReportMetric(ms(s.tick.max), "tick-max-ms")
	b.ReportMetric(us(s.tick.quantile(0.9999)), "tick-p9999-us")
	b.ReportMetric(float64(s.kept.Load()), "kept")
	b.ReportMetric(float64(s.lost.Load()), "kept-lost")
	b.ReportMetric(float64(s.beat.n), "beats")
	b.ReportMetric(0, "ns/op")
}

// soakBeat is one KeepAlive heartbeat, as the Beat and lock hooks saw it.
type soakBeat struct {
	due, began, locked, returned time.Time
	holds                        int           // holds of the lock the heartbeat took (settleNow releases it between batches)
	ownHeld                      time.Duration // how long it held the lock in all
	settled                      uint64        // due items it settled itself
	err                          error
}

// soakHold is a hold of the router's lock longer than soakLongHold.
type soakHold struct {
	at, d   time.Time
	settled uint64 // due items settled in it
	outbox  int    // events waiting in the outbox at its end
}

const soakLongHold = 200 * time.Microsecond

type soakStats struct {
	beat, timer, lockWait, inCall, tick latencies
	router                              latencies // the heartbeat call: from the beat's start to its return
	quiet, quietCall                    latencies // beat and call, of the beats the ticker saw no lag during
	settledMax                          uint64
	kept, lost                          atomic.Int64

	mu     sync.Mutex
	all    []soakBeat // every beat
	holds  []soakHold // every hold longer than soakLongHold (guarded by the router's lock)
	lags   []soakHold // ticks of the control ticker later than a millisecond (at, d as lag)
	lostAt []time.Time
	// For the leases the KeepAlives keep: the instant each last took
	// effect (granted or extended), by token, and the gaps between them.
	kaLast   map[Token]time.Time
	kaBeaten map[Token]bool // extended at least once
	gap      latencies
	// The lease left at each extension after a kept lease's first (its
	// expiry minus the instant the extension took effect): the first
	// depends on when the holder called KeepAlive, the rest on the beats.
	margin    latencies
	lostQuiet int // lost leases the ticker saw no lag over a millisecond for during the lease before the loss
}

// settledSoFar is the due items the router has settled since New (the
// expiries and the purges). The caller holds r.mu.
func settledSoFar[T any](r *Router[T]) uint64 {
	return r.stats.Expirations + r.stats.Purged
}

const soakLease = 40 * time.Millisecond

func keepAliveSoak(b *testing.B, target int) *soakStats {
	const lease = soakLease
	s := new(soakStats)
	var events [EventPurged + 1]atomic.Int64
	r := benchRouter(b, Options{
		LeaseDuration: lease,
		MaxAttempts:   4,
		Retention:     time.Second,
		Capacity:      50_000,
		Backoff:       func(int) time.Duration { return time.Duration(rand.IntN(3)) * time.Millisecond },
		OnEvent: func(e Event) {
			events[e.Kind].Add(1)
			s.kaEvent(e)
		},
		Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)),
	})

	// The lock hooks: every hold's length, and the holds of the goroutines
	// a KeepAlive beat runs in (looked up by goroutine ID only while a
	// beat is in flight).
	var inflight atomic.Int32
	var beatsMu sync.Mutex
	beats := map[uint64]*soakBeat{}
	var held time.Time
	var heldSettled uint64
	var cur *soakBeat
	SetHooks(r, &hook.Hooks{
		Locked: func() {
			held, heldSettled, cur = time.Now(), settledSoFar(r), nil
			if inflight.Load() > 0 {
				beatsMu.Lock()
				cur = beats[goid.Current()]
				beatsMu.Unlock()
				if cur != nil {
					if cur.holds == 0 {
						cur.locked = held
					}
					cur.holds++
				}
			}
		},
		Unlocking: func() {
			if held.IsZero() {
				return
			}
			d := time.Since(held)
			settled := settledSoFar(r) - heldSettled
			if cur != nil {
				cur.settled += settled
				cur.ownHeld += d
			}
			if d > soakLongHold {
				s.holds = append(s.holds, soakHold{held, held.Add(d), settled, len(r.outbox)})
			}
			held, cur = time.Time{}, nil
		},
		Beat: func(due time.Time) func(error) {
			bt := &soakBeat{due: due, began: time.Now()}
			if late := bt.began.Sub(due); late > 5*time.Millisecond && trace.IsEnabled() {
				trace.Log(context.Background(), "late-beat", late.String())
			}
			id := goid.Current()
			beatsMu.Lock()
			beats[id] = bt
			beatsMu.Unlock()
			inflight.Add(1)
			return func(err error) {
				bt.returned, bt.err = time.Now(), err
				inflight.Add(-1)
				beatsMu.Lock()
				delete(beats, id)
				beatsMu.Unlock()
				s.addBeat(bt)
			}
		},
	})

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var wg sync.WaitGroup

	// The control: a plain ticker's lag.
	wg.Go(func() {
		const every = time.Millisecond
		t := time.NewTicker(every)
		defer t.Stop()
		last := time.Now()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-t.C:
				lag := max(0, time.Since(last)-every)
				_ = now
				last = time.Now()
				s.mu.Lock()
				s.tick.add(lag)
				if lag > time.Millisecond {
					s.lags = append(s.lags, soakHold{at: last.Add(-lag), d: last})
				}
				s.mu.Unlock()
			}
		}
	})

	// Producers.
	for p := range 2 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(p), 1))
			for k := 0; ctx.Err() == nil; k++ {
				var opts []EnqueueOption
				if rng.IntN(8) == 0 {
					opts = append(opts, WithDelay(time.Duration(1+rng.IntN(5))*time.Millisecond))
				}
				if rng.IntN(4) == 0 {
					opts = append(opts, WithPriority(rng.IntN(3)))
				}
				var err error
				if rng.IntN(2) == 0 {
					err = r.Enqueue(fmt.Sprintf("p%d-%d", p, k), k, opts...)
				} else {
					specs := make([]JobSpec[int], 64)
					for i := range specs {
						specs[i] = JobSpec[int]{ID: fmt.Sprintf("p%d-%d-%d", p, k, i), Payload: k, Options: opts}
					}
					_, err = r.EnqueueMany(specs)
				}
				if errors.Is(err, ErrFull) {
					time.Sleep(time.Millisecond)
				} else if err != nil && !errors.Is(err, ErrClosed) {
					b.Error(err)
					return
				}
			}
		})
	}

	// Chaos workers.
	for w := range 4 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 2))
			me := fmt.Sprint("w", w)
			for ctx.Err() == nil {
				ls, err := r.AcquireMany(ctx, me, 1+rng.IntN(16))
				if err != nil {
					return
				}
				for _, l := range ls {
					switch x := rng.IntN(100); {
					case x < 12: // crash: abandoned
						continue
					case x < 15: // stall past the expiry, then complete (refused)
						time.Sleep(time.Until(l.Expiry()) + time.Millisecond)
						_ = l.Complete()
						continue
					}
					for i := range rng.IntN(3) {
						_ = l.Heartbeat([]byte{byte(i)})
					}
					switch x := rng.IntN(100); {
					case x < 10:
						_ = l.Fail(errors.New("soak: retry"))
					case x < 13:
						_ = l.Fail(Permanent(errors.New("soak: fatal")))
					case x < 21:
						_ = l.Release()
					case x < 23:
						_ = r.Cancel(l.JobID)
					default:
						_ = l.Complete()
					}
				}
			}
		})
	}

	// A process that leases thousands of jobs at once and crashes.
	wg.Go(func() {
		rng := rand.New(rand.NewPCG(3, 3))
		for ctx.Err() == nil {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Duration(100+rng.IntN(200)) * time.Millisecond):
			}
			_, _ = r.TryAcquireMany("crasher", 512+rng.IntN(4096))
		}
	})

	// Run.
	wg.Go(func() {
		var n atomic.Uint64
		err := r.Run(ctx, WorkerOptions{Workers: 4, WorkerID: "run"}, func(hctx context.Context, l *Lease[int]) error {
			switch x := n.Add(1) % 100; {
			case x < 5:
				select {
				case <-hctx.Done():
				case <-time.After(time.Duration(10+x*10) * time.Millisecond):
				}
			case x < 8:
				return errors.New("soak: handler failed")
			case x == 8:
				panic("soak: handler panicked")
			}
			return nil
		})
		if err != nil {
			b.Error(err)
		}
	})

	// The KeepAlive holders.
	for h := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(h), 4))
			for ctx.Err() == nil {
				l, err := r.Acquire(ctx, fmt.Sprint("ka", h))
				if err != nil {
					return
				}
				kctx, cancel := KeepAlive(ctx, l, 0)
				select {
				case <-kctx.Done():
				case <-time.After(time.Duration(40+rng.IntN(160)) * time.Millisecond):
				}
				var lost *LeaseLostError
				if errors.As(context.Cause(kctx), &lost) && lost.Reason == LostExpired {
					s.lost.Add(1)
					s.mu.Lock()
					s.lostAt = append(s.lostAt, time.Now())
					s.mu.Unlock()
				}
				cancel()
				if ctx.Err() == nil {
					s.kept.Add(1)
				}
				_ = l.Complete()
			}
		})
	}

	for ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
		if st := r.Stats(); st.LeasesGranted >= uint64(target) {
			stop()
		}
	}
	wg.Wait()
	if err := r.Flush(context.Background()); err != nil {
		b.Fatal(err)
	}
	SetHooks(r, nil)
	st := r.Stats()
	b.Logf("%d leases, %d expirations, %d heartbeats, %d stale rejections, %d events; %d kept by KeepAlive, %d of them lost to an expiry; %d beats",
		st.LeasesGranted, st.Expirations, st.Heartbeats, st.StaleRejections, st.Enqueued, s.kept.Load(), s.lost.Load(), s.beat.n)
	s.logSlowest(b)
	return s
}

// kaEvent notes, from the event stream (in order), the gap between the
// instants a kept lease was granted or extended: the lease lasts 40 ms
// from each, so a gap of 40 ms or more lost it.
func (s *soakStats) kaEvent(e Event) {
	if len(e.WorkerID) < 2 || e.WorkerID[:2] != "ka" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.kaLast == nil {
		s.kaLast, s.kaBeaten = map[Token]time.Time{}, map[Token]bool{}
	}
	switch e.Kind {
	case EventLeaseAcquired:
		s.kaLast[e.Token] = e.Time
	case EventLeaseExtended:
		if last, ok := s.kaLast[e.Token]; ok {
			s.gap.add(e.Time.Sub(last))
			if s.kaBeaten[e.Token] {
				s.margin.add(max(0, last.Add(soakLease).Sub(e.Time)))
			}
		}
		s.kaLast[e.Token], s.kaBeaten[e.Token] = e.Time, true
	case EventCompleted, EventLeaseExpired, EventReleased, EventCanceled, EventFailed:
		delete(s.kaLast, e.Token)
		delete(s.kaBeaten, e.Token)
	}
}

func (s *soakStats) addBeat(bt *soakBeat) {
	s.mu.Lock()
	defer s.mu.Unlock()
	total := bt.returned.Sub(bt.due)
	s.beat.add(max(0, total))
	s.timer.add(max(0, bt.began.Sub(bt.due)))
	s.router.add(bt.returned.Sub(bt.began))
	if !bt.locked.IsZero() {
		s.lockWait.add(bt.locked.Sub(bt.began))
		s.inCall.add(bt.returned.Sub(bt.locked))
	}
	s.settledMax = max(s.settledMax, bt.settled)
	s.all = append(s.all, *bt)
}

// logSlowest logs the slowest beats, each with its parts and what it
// waited behind: the long holds of the lock and the ticker's lags that
// overlap its wait.
func (s *soakStats) logSlowest(b *testing.B) {
	// The ticker's largest lag overlapping [from, to].
	lagIn := func(from, to time.Time) time.Duration {
		var lag time.Duration
		for _, l := range s.lags {
			if l.d.After(from) && l.at.Before(to) {
				lag = max(lag, l.d.Sub(l.at))
			}
		}
		return lag
	}
	// The beats whose window the ticker saw no lag over a millisecond in:
	// the process was on time.
	var quiet []soakBeat
	for _, bt := range s.all {
		if lagIn(bt.due, bt.returned) == 0 {
			quiet = append(quiet, bt)
			s.quiet.add(max(0, bt.returned.Sub(bt.due)))
			s.quietCall.add(bt.returned.Sub(bt.began))
		}
	}
	slices.SortFunc(quiet, func(a, c soakBeat) int { return int(c.returned.Sub(c.due) - a.returned.Sub(a.due)) })
	slices.SortFunc(s.all, func(a, c soakBeat) int { return int(c.returned.Sub(c.due) - a.returned.Sub(a.due)) })
	show := func(what string, bt soakBeat) {
		msg := fmt.Sprintf("%s beat %v late: timer %v, lock wait %v, in call %v (%d holds, %v of them, settled %d itself), err %v",
			what, bt.returned.Sub(bt.due), bt.began.Sub(bt.due), bt.locked.Sub(bt.began), bt.returned.Sub(bt.locked), bt.holds, bt.ownHeld, bt.settled, bt.err)
		var holds, most time.Duration
		var n, settled, out int
		for _, h := range s.holds {
			if h.d.After(bt.due) && h.at.Before(bt.returned) {
				n++
				d := h.d.Sub(h.at)
				holds += d
				most = max(most, d)
				settled += int(h.settled)
				out = max(out, h.outbox)
			}
		}
		b.Logf("%s; meanwhile %d holds > %v (%v in all, longest %v, %d items settled, outbox up to %d), ticker lag up to %v",
			msg, n, soakLongHold, holds, most, settled, out, lagIn(bt.due, bt.returned))
	}
	for _, at := range s.lostAt {
		if lagIn(at.Add(-40*time.Millisecond), at) == 0 {
			s.lostQuiet++
		}
	}
	for _, bt := range s.all[:min(3, len(s.all))] {
		show("slowest", bt)
	}
	for _, bt := range quiet[:min(6, len(quiet))] {
		show("quiet", bt)
	}
}

// min returns the least sample, to the microsecond below (0 if none).
func (l *latencies) min() time.Duration {
	for us, c := range l.counts {
		if c > 0 {
			return time.Duration(us) * time.Microsecond
		}
	}
	return 0
}
