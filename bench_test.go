package leaserouter

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Benchmarks of issue 4. Baselines first: what a handoff costs with no
// leases at all, measured in the same run so ratios cancel machine noise.
//
//	go test -run XXX -bench . -benchmem

// BenchmarkBaselineChannel: one value through a buffered channel from one
// goroutine to another.
func BenchmarkBaselineChannel(b *testing.B) {
	ch := make(chan int, 128)
	done := make(chan struct{})
	go func() {
		for range ch {
		}
		close(done)
	}()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		ch <- i
	}
	close(ch)
	<-done
}

// BenchmarkBaselinePool: b.N no-op tasks through a channel-fed pool of 2
// worker goroutines with a WaitGroup, no leases.
func BenchmarkBaselinePool(b *testing.B) {
	b.ReportAllocs()
	tasks := make(chan func(), 128)
	var wg sync.WaitGroup
	var done atomic.Int64
	for range 2 {
		wg.Go(func() {
			for f := range tasks {
				f()
				done.Add(1)
			}
		})
	}
	start := time.Now()
	n := 0
	for b.Loop() {
		tasks <- func() {}
		n++
	}
	close(tasks)
	wg.Wait()
	b.ReportMetric(float64(n)/time.Since(start).Seconds(), "jobs/s")
}

// ids returns n distinct job IDs, made before timing so the benchmarks
// measure the router, not strconv.
func ids(prefix string, n int) []string {
	s := make([]string, n)
	for i := range s {
		s[i] = prefix + strconv.Itoa(i)
	}
	return s
}

func benchRouter(b *testing.B, opts Options) *Router[int] {
	b.Helper()
	r, err := New[int](opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		// Revoke what is still leased instead of waiting for it: the
		// fixtures hold leases for an hour.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_ = r.Close(ctx)
	})
	return r
}

// lifecycle enqueues, leases and completes one job.
func lifecycle(b *testing.B, r *Router[int], id string, opts ...EnqueueOption) {
	if err := r.Enqueue(id, 1, opts...); err != nil {
		b.Fatal(err)
	}
	l, err := r.TryAcquire("w")
	if err != nil {
		b.Fatal(err)
	}
	if err := l.Complete(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkLifecycle: Enqueue + TryAcquire + Complete on one goroutine,
// with finished jobs dropped at once so the map keeps a steady size.
func BenchmarkLifecycle(b *testing.B) {
	r := benchRouter(b, Options{Retention: -1})
	id := ids("j", 1<<10)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		lifecycle(b, r, id[i&(len(id)-1)])
	}
}

// BenchmarkEnqueue: the producer's side alone, Enqueue of b.N new jobs
// (IDs made before timing) into a Router with no worker, so the ID index
// and the ready queue grow as they do under a burst.
func BenchmarkEnqueue(b *testing.B) {
	r := benchRouter(b, Options{Retention: -1})
	id := ids("j", b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if err := r.Enqueue(id[i], i); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEnqueueFloor is not a target: it prices what any Enqueue must
// do on this machine, with none of the router's logic, on BenchmarkEnqueue's
// workload (the same IDs, made the same way before timing, so the two
// compare per call, by time or by callgrind's instructions): check the ID
// against the rule (ValidateID), one uncontended lock/unlock pair, one
// monotonic clock read (the enqueue time), a job record of our size taken
// from a block of recordBlock allocated outside the lock (as Enqueue does),
// an insert of the ID into a Go map (a hash table keyed by the ID, that
// grows in bounded steps as ours does) and an append to a slice (the ready
// queue). It leaves out the duplicate check's separate find, the
// enqueue-order log, the counts, the settle check and the wake-up of a
// waiter, so BenchmarkEnqueue cannot go below it.
func BenchmarkEnqueueFloor(b *testing.B) {
	type jobRec struct { // job[int]: 160 bytes
		_  [144]byte
		at int64
		p  *int
	}
	var mu sync.Mutex
	epoch := time.Now()
	index := make(map[string]*jobRec)
	var ready []*jobRec
	var block []jobRec
	ptr := new(int) // the records hold pointers, as ours do, for the GC to scan
	id := ids("j", b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if err := ValidateID(id[i]); err != nil {
			b.Fatal(err)
		}
		if len(block) == 0 {
			block = make([]jobRec, recordBlock)
		}
		j := &block[0]
		block = block[1:]
		mu.Lock()
		j.at, j.p = int64(time.Since(epoch)), ptr
		index[id[i]] = j
		ready = append(ready, j)
		mu.Unlock()
	}
	runtime.KeepAlive(index)
	runtime.KeepAlive(ready)
}

// BenchmarkLifecycleOptions: BenchmarkLifecycle with three Enqueue
// options on every job, so the option path (read and checked before the
// lock) is measured too.
func BenchmarkLifecycleOptions(b *testing.B) {
	r := benchRouter(b, Options{Retention: -1})
	id := ids("j", 1<<10)
	opts := []EnqueueOption{WithPriority(1), WithMaxAttempts(3), WithTimeout(time.Minute)}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		lifecycle(b, r, id[i&(len(id)-1)], opts...)
	}
}

// BenchmarkLifecycleRetained: BenchmarkLifecycle with a Retention of
// 10 ms, so every finished job enters the retention queue and leaves it
// by purge (about 10 ms of jobs retained at any time).
func BenchmarkLifecycleRetained(b *testing.B) {
	r := benchRouter(b, Options{Retention: 10 * time.Millisecond})
	id := ids("j", 1<<20)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		lifecycle(b, r, id[i&(len(id)-1)])
	}
}

// BenchmarkLifecycleHooked: BenchmarkLifecycle with a no-op OnEvent, so
// every transition records an event for the delivery goroutine. Target:
// <= 1.5 x BenchmarkLifecycle.
func BenchmarkLifecycleHooked(b *testing.B) {
	r := benchRouter(b, Options{Retention: -1, OnEvent: func(Event) {}})
	id := ids("j", 1<<10)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		lifecycle(b, r, id[i&(len(id)-1)])
	}
}

// BenchmarkLifecycleHookedAndLogged is BenchmarkLifecycleHooked with a
// Logger too (discarding), so that each event goes to both hooks.
func BenchmarkLifecycleHookedAndLogged(b *testing.B) {
	r := benchRouter(b, Options{Retention: -1, OnEvent: func(Event) {}, Logger: slog.New(slog.DiscardHandler)})
	id := ids("j", 1<<10)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		lifecycle(b, r, id[i&(len(id)-1)])
	}
}

// BenchmarkLifecycleMany: EnqueueMany of 64 jobs, TryAcquireMany(64) and
// Complete of each, Retention -1; ns/op is per job, to compare with
// BenchmarkLifecycle (target: <= 0.65 of it).
func BenchmarkLifecycleMany(b *testing.B) {
	const batch = 64
	r := benchRouter(b, Options{Retention: -1})
	id := ids("j", 1<<10)
	specs := make([]JobSpec[int], batch)
	jobs := 0
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		for k := range specs {
			specs[k] = JobSpec[int]{ID: id[(i*batch+k)&(len(id)-1)], Payload: 1}
		}
		if _, err := r.EnqueueMany(specs); err != nil {
			b.Fatal(err)
		}
		ls, err := r.TryAcquireMany("w", batch)
		if err != nil || len(ls) != batch {
			b.Fatal(len(ls), err)
		}
		for _, l := range ls {
			if err := l.Complete(); err != nil {
				b.Fatal(err)
			}
		}
		jobs += batch
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(jobs), "ns/op")
}

// BenchmarkLifecycleParallel: the same from b.RunParallel.
func BenchmarkLifecycleParallel(b *testing.B) {
	r := benchRouter(b, Options{Retention: -1})
	var g atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		id := ids(fmt.Sprintf("g%d-", g.Add(1)), 1<<16)
		for i := 0; pb.Next(); i++ {
			if err := r.Enqueue(id[i&(len(id)-1)], 1); err != nil {
				b.Fatal(err)
			}
			l, err := r.TryAcquire("w")
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Complete(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkRun: b.N no-op jobs pre-enqueued, processed by Run with 2
// workers and heartbeats on.
func BenchmarkRun(b *testing.B) {
	r := benchRouter(b, Options{Retention: -1, LeaseDuration: time.Second})
	id := ids("j", b.N)
	for _, s := range id {
		if err := r.Enqueue(s, 1); err != nil {
			b.Fatal(err)
		}
	}
	var left atomic.Int64
	left.Store(int64(b.N))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runtime.GC() // collect the setup's garbage now, not while timing
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	err := r.Run(ctx, WorkerOptions{Workers: 2, HeartbeatInterval: 100 * time.Millisecond},
		func(context.Context, *Lease[int]) error {
			if left.Add(-1) == 0 {
				cancel()
			}
			return nil
		})
	elapsed := time.Since(start)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "jobs/s")
}

// BenchmarkBacklog: the lifecycle with 1,000,000 jobs already pending.
// Each iteration enqueues one job and leases the oldest pending one, so the
// backlog keeps its size and the order's hot data is exercised at scale.
func BenchmarkBacklog(b *testing.B) {
	const backlog = 1_000_000
	r := benchRouter(b, Options{Retention: -1})
	// backlog+1 IDs in a ring: the ID enqueued at iteration i was leased,
	// and so dropped, at iteration i-1.
	id := ids("j", backlog+1)
	for _, s := range id[:backlog] {
		if err := r.Enqueue(s, 1); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		lifecycle(b, r, id[(backlog+i)%len(id)])
	}
}

// BenchmarkReaperIdle: one reaper pass with 1,000,000 live, unexpired
// leases: it must cost the same as with none.
func BenchmarkReaperIdle(b *testing.B) {
	r := benchRouter(b, Options{LeaseDuration: time.Hour})
	for _, s := range ids("j", 1_000_000) {
		if err := r.Enqueue(s, 1); err != nil {
			b.Fatal(err)
		}
		if _, err := r.TryAcquire("w"); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		r.mu.Lock()
		r.settle(r.now(), reapBatch)
		r.armed = r.nextDeadline()
		r.unlockAndDeliver()
	}
}

// BenchmarkExpire: 100,000 leases expiring at once; reports the cost per
// requeue (ns/requeue).
func BenchmarkExpire(b *testing.B) {
	const n = 100_000
	id := ids("j", n)
	var total time.Duration
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		r, err := New[int](Options{LeaseDuration: time.Hour})
		if err != nil {
			b.Fatal(err)
		}
		for _, s := range id {
			_ = r.Enqueue(s, 1)
			_, _ = r.TryAcquire("w")
		}
		r.mu.Lock()
		r.epoch = r.epoch.Add(-2 * time.Hour) // every lease is now an hour past its expiry
		b.StartTimer()
		start := time.Now()
		r.settle(r.now(), -1)
		total += time.Since(start)
		b.StopTimer()
		if r.counts[StatePending] != n {
			b.Fatalf("%d pending, want %d", r.counts[StatePending], n)
		}
		r.unlockAndDeliver()
		_ = r.Close(context.Background())
		b.StartTimer()
	}
	b.ReportMetric(float64(total.Nanoseconds())/float64(b.N*n), "ns/requeue")
}

// BenchmarkMemory: heap bytes per pending job at 1,000,000 jobs with an
// 8-byte payload, everything included (ID, payload, map entry, indexes).
func BenchmarkMemory(b *testing.B) {
	const n = 1_000_000
	b.ReportAllocs()
	var perJob float64
	for b.Loop() {
		b.StopTimer()
		id := ids("job-", n) // the caller's strings; the router keeps them
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		b.StartTimer()
		r, err := New[int64](Options{})
		if err != nil {
			b.Fatal(err)
		}
		for i, s := range id {
			if err := r.Enqueue(s, int64(i)); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		id = nil
		runtime.GC()
		runtime.ReadMemStats(&after)
		perJob = float64(after.HeapAlloc-before.HeapAlloc) / n
		runtime.KeepAlive(r)
		_ = r.Close(context.Background())
		b.StartTimer()
	}
	b.ReportMetric(perJob, "B/job")
}

// BenchmarkRequeueLatency: time from a lease's expiry to its job being
// leased again, under a steady load: a producer keeps inFlight jobs
// unfinished, 2 workers take them, and each job's first lease is abandoned
// (a crash) and expires after 5ms, so a blocked Acquire must get the job
// again. Each iteration is one job. Reports the p99 in ms
// (p99-requeue-ms).
func BenchmarkRequeueLatency(b *testing.B) {
	const lease, inFlight = 5 * time.Millisecond, 256
	r := benchRouter(b, Options{LeaseDuration: lease, Retention: -1})
	id := ids("j", b.N)
	slots := make(chan struct{}, inFlight) // a token per unfinished job
	var mu sync.Mutex
	expiry := make([]time.Time, b.N) // by payload: the abandoned lease's expiry
	lat := make([]time.Duration, 0, b.N)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var left atomic.Int64
	left.Store(int64(b.N))
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Go(func() {
			for {
				l, err := r.Acquire(ctx, "w"+strconv.Itoa(w))
				if err != nil {
					return
				}
				now := time.Now()
				mu.Lock()
				if l.Attempt == 1 {
					expiry[l.Payload] = l.Expiry() // crash: abandon the lease
					mu.Unlock()
					continue
				}
				lat = append(lat, now.Sub(expiry[l.Payload]))
				mu.Unlock()
				_ = l.Complete()
				<-slots
				if left.Add(-1) == 0 {
					cancel()
				}
			}
		})
	}
	for i, s := range id {
		slots <- struct{}{}
		if err := r.Enqueue(s, i); err != nil {
			b.Fatal(err)
		}
	}
	wg.Wait()
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)*99/100])/float64(time.Millisecond), "p99-requeue-ms")
}

// BenchmarkLifecycleFloor is not a target: it prices part of what any
// Lifecycle must do on this machine, with no router logic at all — three
// monotonic clock reads (one per call: the enqueue time, the lease expiry,
// the validity check), three uncontended lock/unlock pairs (one per call)
// and the two allocations of a job record and a Lease of our sizes. It
// leaves out the ID index, the ready queue and everything else, so it is a
// lower bound: Lifecycle's ratio to BaselineChannel cannot go below this
// benchmark's.
func BenchmarkLifecycleFloor(b *testing.B) {
	type jobRec struct { // job[int]: 160 bytes
		_ [152]byte
		p *int
	}
	type leaseRec struct { // Lease[int]: 128 bytes
		_ [120]byte
		p *int
	}
	var mu sync.Mutex
	epoch := time.Now()
	var sink int64
	var keepJob *jobRec
	var keepLease *leaseRec
	ptr := new(int) // the records hold pointers, as ours do, for the GC to scan
	b.ReportAllocs()
	for b.Loop() {
		mu.Lock()
		sink += int64(time.Since(epoch))
		keepJob = &jobRec{p: ptr}
		mu.Unlock()
		mu.Lock()
		sink += int64(time.Since(epoch))
		keepLease = &leaseRec{p: ptr}
		mu.Unlock()
		mu.Lock()
		sink += int64(time.Since(epoch))
		mu.Unlock()
	}
	runtime.KeepAlive(keepJob)
	runtime.KeepAlive(keepLease)
	runtime.KeepAlive(sink)
}

// BenchmarkRunFloor is not a target: it prices the one step of Run's job
// that touches memory no cache holds. Run, like BenchmarkRun, starts with
// b.N jobs and drops each finished one from the ID index at once
// (Retention -1), and the entry of a job enqueued long ago is a cache miss.
// Here: b.N deletes from a Go map of b.N string keys, in insertion order,
// on one goroutine with no lock and nothing else, reported in jobs/s like
// BenchmarkRun. Run's throughput cannot exceed it.
func BenchmarkRunFloor(b *testing.B) {
	id := ids("j", b.N)
	index := make(map[string]*int)
	for _, s := range id {
		index[s] = new(int)
	}
	runtime.GC()
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for _, s := range id {
		delete(index, s)
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "jobs/s")
}
