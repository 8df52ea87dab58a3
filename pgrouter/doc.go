// Package pgrouter is the leaserouter contract on PostgreSQL (14 or
// later): one durable job set shared by many processes on many machines,
// with the core's concepts, names and guarantees — leases with an expiry,
// a fencing token per lease, attempts, backoff, dead jobs, heartbeats with
// checkpoints, Run and KeepAlive — and the core's types wherever the
// meaning is the same (leaserouter.Token, State, Job, JobSpec,
// WorkerOptions, EnqueueOption, Permanent, LeaseLostError, ...), so moving
// from one process to many changes a constructor and a lease type, not a
// handler's logic. The package example is one job's life (Migrate, New,
// Enqueue, Acquire, Complete); NewClient's runs a kind of job with a
// Client, and Lease.CompleteTx's writes a result and completes its job in
// one transaction.
//
// # The one invariant, in database time
//
// A lease is valid iff the job's row has its token, is leased, and its
// lease_expires_at is after clock_timestamp() at the moment the operation
// holds the row's lock. Every lease operation locks the row and then, in
// the same transaction and round trip, checks exactly that and acts, or
// changes nothing and reports the current token and the reason. The
// client's clock is never used for validity: durations are sent as
// intervals added to the database's clock. CompleteTx and Fence run in the
// caller's transaction, so a job's result and its completion commit
// together, and a stale holder's write is refused by the database
// (Kleppmann, "How to do distributed locking", 2016; Chubby's sequencers,
// Burrows, OSDI 2006). The row CompleteTx completed stays locked by the
// caller's transaction until it ends, so no other lease of the job can be
// granted meanwhile: work in that transaction after CompleteTx, before
// the commit, is safe however long it takes, and Run and KeepAlive count
// the lease as held while the transaction is open (their heartbeats find
// it in progress on the database). A refused CompleteTx rolls back to a
// savepoint of its own: the row is not left locked, so a stale holder's
// open transaction never blocks the valid holder, and the caller's
// transaction stays usable.
//
// # Rules that differ from the core
//
//   - Order is exact within one claim; concurrent claimers skip rows
//     locked by each other (FOR UPDATE SKIP LOCKED), so two claims may
//     interleave.
//   - Wake-ups: LISTEN/NOTIFY on enqueue, release, retry (a failed
//     attempt's, and Router.Retry), Resume and expiry settling, plus a
//     timer at the earliest due instant, plus a poll every
//     Options.PollInterval: a missed notification delays a job by at most
//     that.
//   - Stats: counts by state come from the table, exactly for a state
//     with at most 20,000 jobs, estimated from the planner's statistics
//     for a larger one (Stats.Estimated; ExactStats counts every job), so
//     that Stats takes milliseconds at millions of jobs; totals are this
//     Router's own since New (other processes' calls are not in them).
//     Purged counts the rows of finished jobs this Router deleted (its
//     maintenance loop, at most a PollInterval after their retention
//     ended; Run's completions at Retention < 0, at once) or replaced (an
//     Enqueue of the same ID): a job dropped at once (Retention < 0) is
//     invisible at once but counted, and its purged event emitted, when
//     its row goes, by the process that removes it.
//   - Capacity is not offered: the table is the queue.
//   - TryAcquireMany and AcquireMany lease at most leaserouter.MaxBatch
//     (1024) jobs a call, whatever max asks; the core leases up to max.
//   - LeaseDuration has a floor, MinLeaseDuration (1ms): a positive one
//     below it is refused by New (ErrInvalidOptions, with the core's
//     message for the field, naming the floor), since the database keeps
//     instants in microseconds and a lease must outlast a round trip. The
//     core takes any positive LeaseDuration. Every other option shared
//     with the core is checked as the core checks it, with the same
//     messages.
//   - A job's WithTimeout is stored in microseconds, and Lease.Snooze's
//     delay is sent in microseconds, each rounded up (a positive one
//     below a microsecond becomes one): Job.Timeout reads back 1µs for
//     WithTimeout(1ns). Run applies the limit as the core does, from the
//     handler's start on the client's clock; a snooze's run-at is the
//     database's clock + the delay.
//   - Events are emitted by the process that made the transition, ordered
//     within that process (see Options.OnEvent); lease_expired, dead on
//     expiry and purged come from whichever process settles or purges.
//   - Faults: calls return errors wrapping the driver's. When the outcome
//     of Complete, Fail or Release is unknown (the connection failed, or
//     the call's ctx ended, after the statement was sent), the call finds
//     it out before it returns, within 40ms after its ctx ended: nil if
//     the lease ended as asked, otherwise the error, and either answer is
//     final. Past that it returns the error with the outcome unknown, and
//     a retry tells (a second Complete of a completed lease is refused
//     with reason completed). This holds behind poolers such as
//     PgBouncer. CompleteTx's outcome is its transaction's commit, the
//     caller's to know. A claim (Acquire, TryAcquire, their batch forms,
//     Run taking jobs) whose reply never arrived is resolved in the
//     background by the Router: the leases it granted are handed back,
//     pending again in their place with the attempt not counted (an
//     attempt counts only a lease a worker received); they emit no event
//     and are not counted in Stats.LeasesGranted. The resolution is
//     retried until it gets through or Close ends it; a claim still
//     unresolved then (the database unreachable until Close's ctx ended)
//     leaves its leases to expire, their attempt counted. Lease
//     operations and claims take transaction-level advisory locks on
//     random 64-bit keys, which do not meet an application's own advisory
//     locks in practice.
//   - ctx is honoured within 100ms everywhere, with the pool exhausted or
//     the server stalled: waiting for a connection, for a claim's reply,
//     for Close's revocation, for Run's last round trips once its
//     handlers returned. What is left unknown is resolved in the
//     background, by the Router, until Close (which waits for that work
//     until its own ctx ends).
//   - A claim resolved late: a lease of a claim whose reply never arrived,
//     whose expiry was settled before the resolver got through (the
//     database unreachable from the claimer for a LeaseDuration), has
//     that settlement undone, unless the job was leased again or
//     canceled since: pending, the attempt not counted (a job dead of
//     that expiry lives again), ready since the claim. The settlement's
//     events (lease_expired, dead) stand, and a dead job purged meanwhile
//     (its Retention over) stays gone.
//   - A lease is proven valid, on the client's monotonic clock, for
//     LeaseDuration from the send of the statement that proved it (the
//     claim, then each accepted heartbeat), after any wait for a pool
//     connection, never from before it: a claim that waited for the pool
//     hands out a lease proven for a whole LeaseDuration. Run survives a
//     database restart: it backs off and goes on, and a handler's ctx is
//     canceled as soon as its lease can no longer be proven valid.
//   - Heartbeats never wait for the caller's pool: Run and KeepAlive
//     heartbeat on a connection of their own (one per Router, or per
//     Client, whose rounds take turns; made again when it fails), so a
//     lease is kept while the caller's transactions hold every pooled
//     connection; a round never waits for a row another transaction
//     holds (that lease is left to a round soon after), so one held row
//     never delays the others' heartbeats. With the listening connection, a Router or a Client
//     holds two connections outside its pool, however many Runs, kinds
//     and queues it has.
//   - Close waits for an abandoned lease only until its expiry as proven
//     by its last accepted heartbeat, then revokes what is still valid.
//
// # Operating a queue
//
// Beside Get, Cancel and Stats, the operator's calls (the
// core's with a ctx first and an error):
//
//   - List: a page of the queue's jobs, newest first by enqueue order,
//     filtered by states and ID prefix, paged by an opaque keyset cursor
//     valid in every process (one walk of the index
//     leaserouter_jobs_order_unleased per selected state other than
//     leased, stopping after a page; the leased state, a walk of the
//     index leaserouter_jobs_leased_seq, stopping after a page too; with
//     an ID prefix few of a state's newest jobs have, a range of the jobs
//     of that state by ID, whatever the database's collation, the leased
//     state's a walk of that index comparing each entry's ID, at most the
//     queue's leases in flight, few as the workers of every process). With ListParams.OmitPayload
//     (the console's list pages) neither payload nor checkpoint is read.
//     It works after Close.
//   - Retry: a finished job pending again at once, attempt 0, in its
//     place in the order; emits retried (Stats.Retried: this Router's).
//   - RunNow: a scheduled job (a delay, or a retry waiting out its
//     backoff) pending at once, its attempt count kept.
//   - Delete: a job not leased removed, its row deleted (its ID may be
//     enqueued again); emits purged (Stats.Purged).
//   - Pause and Resume: the queue's, stored in the table
//     leaserouter_queues, so every process sharing it stops granting (the
//     claim statement reads it, in the same statement) and is woken by a
//     Resume at once (a notification). Stats.Paused reads it.
//   - Queues: the database's queues, with counts by state (as Stats
//     counts them: QueueInfo.Estimated; ExactQueues counts every job) and
//     whether each is paused.
//   - Leases: the queue's live leases, expiring soonest first;
//     LeasePage pages through them by a cursor valid in every process.
//   - RetryMany, CancelMany, DeleteMany: the action on up to
//     leaserouter.MaxBulkIDs jobs in one round trip and one transaction
//     (the jobs' rows locked in ID order, their expired leases settled,
//     then one statement for them all), each job only if it is still in
//     one of the states the caller names (a job that moved since the
//     caller listed it is left alone and counted in
//     leaserouter.BulkResult.Moved). Retry, Cancel and Delete are the
//     same calls with one ID.
//   - History: per minute of the database's clock for the last hour, what
//     every process on the queue counted (completions, failed attempts,
//     deaths, expiries, stale refusals): each process adds its counts to
//     the table leaserouter_history every PollInterval, off the hot path.
//
// Retry, RunNow, Delete, the bulk calls, Pause and Resume return ErrClosed after
// Close. A Router of any payload type T is a console.Source (module
// github.com/leaserouter/leaserouter/console) as it is: the console
// reads it through ListJSON, GetJSON and LeasePageJSON, which return the
// payload column as JSON without decoding it into T; the command
// pgrouter/cmd/leaserouter serves the console of every queue of a
// database, and does the same from a shell.
//
// # Periodic jobs
//
// AddPeriodic enqueues a job at each tick of a leaserouter.Schedule, one
// job per tick whatever the number of processes that schedule it, with
// no leader: each process's scheduler sleeps until the tick (a timer),
// and the database lets one of them take it (the tick's record in
// leaserouter_periodic_ticks, inserted by the transaction that inserts
// the tick's job, which locks the periodic job's row in
// leaserouter_periodic). No scheduler waits for another's lock: a process
// stalled inside a tick's transaction delays that periodic job only; the
// other schedulers defer the ticks that come due meanwhile and take them
// once its transaction ends (the server ends it after 5s idle in it; see
// AddPeriodic for a process stopped in the middle of a statement), the
// tick it took too if it rolled back. The database's clock decides which tick is due; none before the
// periodic job's first registration on the queue ever; after every
// scheduler was down, the first back enqueues the latest missed tick
// only, if younger than Options.Retention. See AddPeriodic.
//
// # Kinds and metadata
//
// Every job has a kind (leaserouter.Job.Kind), stored with it: the
// Options.Kind of the Router that enqueued it, "" by default. A Router
// leases only jobs of its kind, so Routers (and Clients) of different
// kinds share a queue: a job of a kind a process does not serve is never
// leased by it, and no attempt of it is counted; it waits, in its place
// in the queue's order, for a process that serves its kind. Get, List
// and Leases return jobs of every kind, each with its Kind; a job of
// another kind than the Router's has a zero Payload (its payload is
// another type), unless T is json.RawMessage. ListParams.Kinds selects
// kinds.
//
// leaserouter.WithMetadata's pairs are stored with the job (a jsonb
// object), kept across its attempts, Snooze and Retry, and read back in
// Job.Metadata (Get, List, Leases) and Lease.Metadata.
//
// Job.Errors, the records of a job's failed attempts
// (leaserouter.AttemptError: a Fail's cause, a handler's panic or
// timeout, an expired lease), is the jsonb array errors (schema version
// 19; NULL for none), the last leaserouter.MaxAttemptErrors kept and
// each appended by the statement that records the failure, at the
// database's clock. Get and List read it; List with OmitPayload, Leases
// and LeasePage do not. A job's failures before version 19 keep their
// LastError and have no record; processes of an earlier version record
// none while they run, and their claim resolver, undoing a lost claim's
// expiry, leaves that expiry's record (the job's next attempt then has
// the number of a recorded one).
//
// During a rolling upgrade from a version before kinds, the processes
// of that version lease jobs of every kind in their queue (their claim
// knows no kind): upgrade every process of a queue before enqueueing
// jobs of a new kind on it. Their own jobs have kind "" and no metadata,
// also where their enqueue takes the row of a finished job of another
// kind past its retention (a trigger sees to it). During an upgrade from
// schema version 16 (the first version with Clients), the processes of
// that version stay correct once version 18 dropped the index their List
// by kind and their Client's Drained check walked, but those two then
// read every job of the queue in the states asked, not a page of the
// kinds': replace them before listing large queues by kind. Version 21
// drops the kindless index of pending jobs, leaserouter_jobs_ready, that
// the processes of a version before 15 claim with (their claim names no
// kind): they stay correct once it is gone, but each of their claims, and
// each of their Stats, then reads and sorts every pending job of its
// queue (at 100,000 pending jobs, a sequential scan of the table and a
// sort spilled to disk: thousands of buffers and tens of milliseconds or
// more a claim, where the index's walk read only the jobs it took).
// The processes of versions 18 to 20 claim with version 15's index and
// are not slowed, but their Stats reads the head of the ready order
// (Stats.ReadySince) from the dropped index too, and then reads every
// pending job of the queue for it (at 100,000, about 30 ms a call). So
// upgrade every process before migrating to version 21: the ones before
// 15 at least, and the ones that call Stats often (a metrics exporter,
// a console) on large queues. Likewise, from a version before schema
// 23: once version 25 dropped the index by ID their List with an ID
// prefix read, such a page of a prefix rare
// among a state's newest jobs reads that state's jobs, not those with
// the prefix (correct, and slow: measured at a million jobs, 0.7 to 1
// second a page of every state, against 10 ms): replace them before
// listing large queues by ID prefix. Version 27 drops the index of List's
// order and the counts by state, leaserouter_jobs_order (queue, state,
// seq), replaced by version 26's leaserouter_jobs_order_unleased, which
// holds no leased job (a claim or a heartbeat writes no entry in it):
// the processes of a version before schema 26 stay correct once it is
// gone, but they have no index by state left, so their List pages and
// Stats read the whole jobs table (every queue's jobs) once per state
// asked, and their Queues and console overviews the whole table for each
// queue and state, not a page or the 20,000 a count stops at (minutes at
// ten million jobs). A process of this version needs the latest version
// to start (New), so replace the older ones as soon as Migrate has run;
// stop first those that list or count often (a console, a metrics
// exporter). Version 29 drops version 24's index of leased jobs by ID,
// leaserouter_jobs_id_leased, replaced by version 28's
// leaserouter_jobs_leased_seq: the processes of schema versions 26 and 27
// read the leased jobs with an ID prefix from the new index as from the
// old (their statement is the same walk; in a database whose collation
// is C the planner may read the prefix's range of the primary key
// instead, every state's jobs with the prefix), and their List pages of
// leased jobs walk it and stop after a page rather than sorting the
// leases in flight; those of versions 24 and 25 are slowed already once
// 27 ran (above).
//
// # Clients
//
// A Client runs many kinds of jobs over a few queues, as the core's
// Client does, with the same names: NewClient (on a pool), Register
// (a kind's name, its payload type and Handler, its queue with
// leaserouter.WithKindQueue), Kind.Enqueue, EnqueueMany, EnqueueTx and
// EnqueueManyTx (with the caller's transaction), Start, Stop and
// Drained, and Queue(name) for the admin calls. Each queue's claim takes
// jobs of every kind the Client registered, in the queue's order, and
// only those; a queue's QueueConfig.Workers bounds its handlers in this
// process. ClientOptions.Middleware wraps every attempt (see
// leaserouter.Middleware); the payload is decoded into the kind's type
// inside it, so a payload that does not decode is the attempt's error
// (the attempt fails, as a Router's would). Clients and Routers of
// other kinds may share a queue: a Router is a Client of one kind, its
// Options.Kind.
//
// # Transaction isolation
//
// pgrouter runs at READ COMMITTED, PostgreSQL's default: a statement that
// waits for a row another transaction locks (a claim, a lease's end, a
// periodic tick's take) then reads the row as that transaction committed
// it, where at REPEATABLE READ or SERIALIZABLE it would fail with a
// serialization failure (SQLSTATE 40001). The transactions pgrouter
// begins (New's, each periodic tick's, Migrate's) state READ COMMITTED
// themselves; its other statements run alone, at the session's default.
// So db's sessions must keep default_transaction_isolation at 'read
// committed': New refuses a pool whose connection says otherwise (an
// error wrapping leaserouter.ErrInvalidOptions). pgrouter changes no
// setting of db's sessions; a database's or role's setting (ALTER
// DATABASE ... SET default_transaction_isolation), a connection string's
// options or a pool's AfterConnect that sets another isolation is to be
// left off the pool given to New (Migrate works under any). The
// transactions given to EnqueueTx and CompleteTx run at their caller's
// isolation: at REPEATABLE READ or above, the call may fail with a
// serialization failure, and the transaction is to be retried whole.
//
// # Schema
//
// Migrate creates the tables leaserouter_jobs (its claim column holds
// the id of the claim that granted a job's latest lease, its leased_at
// column that lease's grant instant, for Event.Held, its timeout_us
// column the job's WithTimeout, read only where timeout_of, set with it,
// is the row's created_at),
// leaserouter_fences, leaserouter_abandoned_claims (claims and lease
// operations resolved by their client, kept a day: see Faults),
// leaserouter_ended (schema version 20: the leases each of Run's
// completions at Retention < 0 ended by deleting their rows, kept ten
// minutes, so that a completion whose reply was lost learns from its
// retry that it completed) and
// leaserouter_queues (paused queues), leaserouter_history (History's
// per-minute counts of each process), leaserouter_periodic (each periodic
// job's first registration and last tick taken) and
// leaserouter_periodic_ticks (each tick taken, kept while Retention
// lasts; a trigger on leaserouter_periodic records the ticks taken by
// processes of a version before schema 12, which raise last_tick
// only), the sequences leaserouter_token
// (fencing tokens: cache 1, raised by New above TokenFloor and the Unix
// time in nanoseconds, never lowered) and leaserouter_job_seq (enqueue
// order), partial indexes for the ready order, scheduled run-ats, lease
// expiries and purge times, the index leaserouter_jobs_order_unleased
// (queue, state, seq) of the jobs not leased for List and the counts
// (schema version 26, built concurrently; version 27 drops version 6's
// leaserouter_jobs_order, which held the leased jobs too, so a claim and
// each heartbeat wrote an entry in it: the leased jobs are counted
// from the index of lease expiries, the leases in flight, and listed
// from the next one), the index leaserouter_jobs_leased_seq (queue,
// seq, id COLLATE "C") of the leased jobs in List's order with their IDs
// (schema version 28, built concurrently; version 29 drops version 24's
// leaserouter_jobs_id_leased (queue, id COLLATE "C"), whose place it
// takes: a claim writes an entry in one index of leased jobs for List,
// not two), the index by ID for List's ID prefix of the jobs not leased,
// leaserouter_jobs_id_unleased (queue, state, id COLLATE "C", with seq
// and purge_at) (schema version 23, built concurrently, writes to the
// jobs table going on meanwhile; version 25 drops version 11's
// leaserouter_jobs_id, which held every state, so a claim and the end of
// a lease wrote an entry in it), joint statistics of queue and
// state (leaserouter_jobs_queue_state) for the estimated counts, and
// (schema versions 14 to 18) the columns kind, metadata and kind_of
// (the created_at of the job whose kind and metadata the row holds; the
// trigger leaserouter_jobs_kind_reset resets both where an insert of a
// version before 14 takes a purged job's row), the index
// leaserouter_jobs_kind_ready (queue, kind, priority DESC, ready_at,
// seq) of pending jobs, which the claim walks kind by kind, and
// leaserouter_jobs_kind_list (queue, kind, state, seq) of the jobs of a
// kind other than "" that are not leased, for List by kind (leased jobs
// are listed by kind from the queue's leases in flight), both built
// concurrently; version 18 drops version 16's
// leaserouter_jobs_kind_order, which held the leased jobs too (DROP
// INDEX CONCURRENTLY: reads and writes go on meanwhile). Version 21
// drops version 3's kindless index of pending jobs,
// leaserouter_jobs_ready (queue, priority DESC, ready_at, seq), likewise:
// every statement reads leaserouter_jobs_kind_ready instead (Stats' head
// of the ready order by a skip scan of the kinds with pending jobs), and
// each job no longer pays an entry in it when it becomes pending.
//
// A concurrent index build that fails or is interrupted (Migrate's ctx
// ended, its process killed, a statement_timeout on db's connections)
// leaves the index INVALID: present, kept up to date by every write, used
// by no query. Such an index is listed by
//
//	SELECT indexrelid::regclass FROM pg_index WHERE NOT indisvalid
//
// and is repaired by running Migrate again (version 11, 15, 16, 17, 23,
// 24, 26 or 28 is recorded only once its index is valid and as the
// migration defines it, version 18, 21, 25, 27 or 29 only once its index
// is gone; Migrate drops
// an invalid one, or one of that name defined otherwise, with DROP INDEX
// CONCURRENTLY, and builds it again). By hand, the same: DROP INDEX
// CONCURRENTLY leaserouter_jobs_id_unleased, then CREATE INDEX
// CONCURRENTLY leaserouter_jobs_id_unleased ON leaserouter_jobs (queue,
// state, id COLLATE "C") INCLUDE (seq, purge_at) WHERE state <> 'leased'.
// Payloads are
// JSON (encoding/json) in a jsonb column, readable in SQL. The jobs table
// is created with aggressive autovacuum settings (every job is updated
// several times and deleted), and the Router vacuums and analyzes it
// itself when it is due, unless Options.NoVacuum (see New): a claim walks
// the index of pending jobs from where the dead entries of the jobs
// claimed before it lie. A long-running transaction elsewhere in the
// database (an open snapshot) keeps dead rows alive and slows claims.
//
// The jobs table's fillfactor is 50 (schema version 22; 85 before):
// inserts fill each page to half, leaving room on it for the new
// versions of its rows that a claim, a heartbeat and a lease's end write
// (updates of indexed columns: never HOT). A new version on its row's own
// page is logged smaller, and without a lock record on a second page: on
// the enqueue and drain of 30,000 no-op jobs (BenchmarkWAL in the
// repository's benchmarks module), 2,089-2,124 bytes of WAL a job at 50
// against 2,197-2,241 at 85 (2,149-2,181 at 70) with the default
// Retention; at Retention -1, 1,480-1,489 against 1,563-1,567
// (1,540-1,545). The cost is space, and reads of pages no vacuum has
// marked all-visible yet: the table takes about 356 bytes a job it holds
// (pending, scheduled, leased, or finished and kept for its Retention),
// against 205 at 85 and 248 at 70 (its indexes, about 270 bytes a job, do
// not change), and a List page or a count that reads the table before the
// next vacuum visits that many more pages (at a million jobs just
// written, List's pages took up to twice as long as at 85). A queue that
// holds millions of jobs for long and runs few may trade the WAL back for
// space:
//
//	ALTER TABLE leaserouter_jobs SET (fillfactor = 85);
//
// It applies to pages filled from then on (VACUUM FULL, which locks the
// table while it rewrites it, or pg_repack, applies it to the others),
// and takes no lock that stops reads or writes. Version 22 changed only a
// fillfactor of 85 (one set by hand before it stays), and no later
// version changes the setting. Its down migration sets 85 back wherever
// the fillfactor is 50, so it cannot tell a 50 set by hand before
// version 22 from its own: it resets that one too.
//
// A job's state is the enum leaserouter_job_state, whose labels are
// leaserouter.State's names ('pending', 'scheduled', 'leased',
// 'succeeded', 'canceled'), except that the label 'failed' is the dead
// state (leaserouter.StateDead, the state's name before it was renamed
// "dead"): the label is kept, so that processes of older versions go on
// working during a rolling upgrade, and SQL written against the table
// says state = 'failed' for the dead jobs. The rules every lease
// statement shares are SQL functions: leaserouter_lease_valid (the one
// invariant) and leaserouter_end_lease (how a lease ends and where its job
// goes, a snooze included). Every statement pgrouter runs is a file of the module's sql/
// directory, whole, with named parameters.
//
// # Schemas and migrations
//
// By default every object above is named unqualified, and found through
// the connections' search_path (usually in "public"). Options.Schema
// puts them in a schema of the user's (which must exist: MigrateTo does
// not create it): MigrateTo with the same MigrateOptions.Schema makes
// them there, and every statement of a Router with that Schema names them
// "schema".leaserouter_jobs and so on, whatever the search_path. Routers
// of two schemas share nothing: jobs, tokens, fences (FenceIn), the
// LISTEN/NOTIFY channel ("leaserouter:" and the schema; "leaserouter" for
// the default one) and Migrate's advisory locks are each schema's own.
//
// Migrate brings the default schema up to LatestVersion; MigrateTo takes
// a schema up or down to any version (VersionNone: nothing left). Every
// version has a down migration that undoes exactly it; what going down
// drops is listed at MigrateTo. For teams that apply migrations with
// their own tool (goose, golang-migrate, atlas), MigrationSQL returns the
// SQL of each version, up or down, with its record in
// leaserouter_migrations, so New accepts a schema they migrated; the
// command leaserouter migrate --print prints it.
//
// Package pgtest gives tests a fresh migrated database in one call.
package pgrouter
