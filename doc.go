// Package leaserouter routes jobs to workers inside one process under
// expiring leases with fencing tokens, so that a worker that crashes, hangs
// or stalls can never strand a job, and a worker that wakes up after its
// lease has passed to another can never overwrite the newer worker's result.
//
// Start with a Client (see the example of NewClient): it runs the kinds of
// jobs of a service, each with its payload type and Handler, on queues of
// their own. A Router (New) is one job set of one payload type, for a
// program with one kind of job or its own worker loop: workers take jobs
// with Acquire or TryAcquire and get a Lease; they finish with
// Lease.Complete, Lease.Fail or Lease.Release, and keep a long job alive
// with Lease.Heartbeat. Router.Run does all of that for a Handler, with
// background heartbeats and a context canceled the moment the lease is lost
// (see its example). The pgrouter module has the same calls on PostgreSQL.
//
// Delivery is at least once: a job whose lease expires runs again, possibly
// while the first worker is still going. Make side effects idempotent or
// fence them. Everything lives in the host process; nothing is persisted.
//
// # Leases
//
// A lease is a lock with a deadline (Gray and Cheriton, "Leases: An
// Efficient Fault-Tolerant Mechanism for Distributed File Cache
// Consistency", SOSP 1989). At any instant a job has at most one valid
// lease: its current one, while the router's monotonic clock is before the
// lease's expiry. Every lease operation checks that, so a lease is lost at
// exactly its expiry whether or not the reaper — a background goroutine
// that sleeps until the next deadline — has run. A lease that
// expires counts as an attempt; after Options.MaxAttempts attempts a job is
// dead (StateDead). Lease.Fail schedules a retry after Options.Backoff.
// Heartbeats may carry progress, a checkpoint handed to the next lease.
//
// # Fencing
//
// Every lease carries a Token, strictly increasing over all leases a Router
// grants and seeded above the wall-clock time at New, so it keeps increasing
// across restarts (fencing tokens: Kleppmann, "How to do distributed
// locking", 2016; Chubby's sequencers, Burrows, OSDI 2006). A lease check at
// the router cannot stop a stale holder from writing elsewhere; a Fence at
// the resource can: Fence.Do refuses any token lower than one it has
// admitted for the same key.
//
// # Workers
//
// Router.Run starts worker goroutines that acquire, heartbeat every
// WorkerOptions.HeartbeatInterval, and complete or fail each job from the
// Handler's result; a panic fails the attempt with its stack. With a deep
// backlog of short jobs each worker leases a batch of them at once
// (WorkerOptions.Batch; see Run for the rule that keeps long jobs safe).
// KeepAlive gives
// the same heartbeat and lost-lease context to code that acquires leases
// itself. Choose LeaseDuration above the longest pause a healthy worker can
// have (GC, a slow call) and the heartbeat interval at a third of it or less.
//
// # Clients
//
// A service with several kinds of jobs holds one Client (NewClient) rather
// than a Router and a Run per kind. Register gives each kind its name,
// payload type and Handler, and a queue (WithKindQueue); Kind.Enqueue adds
// a job of that kind, before Start too. Start runs every queue, each with
// its own Workers, so a slow kind in one queue never holds back another;
// one claim serves every kind of a queue in the queue's order. Middleware
// runs around every attempt (tracing, logging), and WithMetadata carries
// a small map of strings with a job, read back by the Middleware in
// Attempt.Metadata. Drained waits until every queue is empty (for tests
// and batch programs), Stop lets running handlers finish and closes the
// queues, and Client.Queue gives one queue's operator calls. Fencing
// tokens increase across all the queues of a Client.
//
// # Periodic jobs, timeouts and snooze
//
// Router.AddPeriodic enqueues a job at every tick of a Schedule (Every, or
// any parsed robfig/cron/v3 schedule) with the ID TickID(name, tick), so
// that the dedup of IDs makes one job per tick however many schedulers run
// it, with no leader election (pgrouter: across processes; see
// AddPeriodic for which ticks a scheduler enqueues after a pause).
// WorkerOptions.Timeout and WithTimeout limit each attempt: the handler's
// ctx is canceled at the limit with a *TimeoutError cause while the lease
// stays heartbeated. Lease.Snooze, or a Run handler's Snooze(d), ends the
// lease and has the job run again after d without counting the attempt.
//
// # Observability
//
// Options.OnEvent receives every transition in order, from a delivery
// goroutine of the Router's own, so hooks never slow a lease operation (at
// most 16384 events wait; beyond that Enqueue and Acquire wait for
// delivery; Router.Flush waits until every event so far is delivered). Each Event carries the durations it closes: Event.Wait on
// lease_acquired (how long the job was ready; with Event.Requeued, how long
// it waited after its previous lease expired) and Event.Held when a lease
// ends (on completed and failed, the job's run time). Options.Logger writes
// every event as a slog record with the keys event, job_id, token, attempt,
// worker_id and err. Router.Stats gives counts and totals (heartbeats
// accepted and refused among them), Router.Audit checks every internal
// invariant, and Router.Get a copy of one job. With no hook set, none of
// this costs more than a branch. A panic in a hook (or in Options.Backoff)
// is recovered, counted in Stats.CallbackPanics and logged.
//
// # Operating it
//
// The operator's calls: Router.List pages through the
// jobs newest first by a keyset cursor, filtered by state and ID prefix;
// Router.Leases lists the live leases, expiring soonest first, and
// Router.LeasePage pages through them by a cursor; Router.Retry
// runs a finished job again with a fresh attempt budget; Router.RunNow
// runs a scheduled job (delayed, or a retry waiting out its backoff) now;
// Router.Delete
// removes a job that is not leased, with its dedup record; Router.Pause and
// Router.Resume stop and restart the granting of leases (everything else
// goes on); Router.History counts what happened in each of the last 60
// minutes. The console module (github.com/leaserouter/leaserouter/console)
// serves them as web pages mounted in your own server.
//
// Adapters live in modules of their own, so this one needs only the
// standard library: github.com/leaserouter/leaserouter/prometheus (a
// prometheus.Collector) and github.com/leaserouter/leaserouter/otel
// (OpenTelemetry instruments, following the messaging semantic conventions
// where they apply). Each takes the events through OnEvent and reads Stats
// when scraped or collected.
package leaserouter
