// Package console is the operator's web console of leaserouter: an
// http.Handler to mount in a service, under any path prefix, that shows
// what is in its queues and acts on it. The package example mounts one
// over a Router in a test server and reads a job's page.
//
//	h, err := console.New(console.Options{ReadOnly: false}, console.Router("mail", router))
//	mux.Handle("/ops/jobs/", http.StripPrefix("/ops/jobs", h))
//
// # Pages
//
// The overview shows each queue's counts by state, whether it is paused
// (with Pause and Resume buttons), and the last hour per minute as an SVG
// chart drawn on the server, with its totals: completions and failed
// attempts, jobs that became dead, expirations and stale rejections. The
// last hour comes from the source's History, so on a backend shared by
// several processes (pgrouter) it is every process's, not the console
// process's own. Counts that are estimates (leaserouter.Stats.Estimated)
// are marked ≈, with the age of the statistics they come from
// (Stats.EstimatedAsOf; the age is the console process's clock minus
// that instant, which pgrouter reads in the database's clock, so a skew
// between the two clocks is in it). Stats says only whether any state
// is estimated, so all six of a queue's counts are marked then, though
// a state with few jobs (pgrouter: at most 20,000) is counted exactly;
// a source that is an ExactCounter offers to count
// exactly, once, on demand (Action CountExactly; one count of a queue at
// a time, shared by the requests that ask for it meanwhile). The queues'
// counts and histories are read concurrently, a few queues at a time.
// The jobs page filters by queue, state, kind (Job.Kind; the kind
// parameter, repeated for several, is ListParams.Kinds) and ID
// prefix, shows each job's kind, and pages by keyset (the NextCursor of List); jobs ticked, or
// every job matching the filter (up to MaxBulk), can be retried, canceled
// or deleted through the bulk calls of the Source (one per state shown):
// each job only if it is still in the state it was shown in, with a
// state filter or without, so a job that moved since it was shown (a
// pending job a worker leased, a dead job someone retried) is left
// alone, and the result page counts it. A job's page shows its fields
// (its kind and its metadata among them, escaped as every field is),
// its checkpoint, its failed attempts (Job.Errors, newest first: number,
// time, worker, error), its payload through Options.Redact and, while it is
// leased, the lease: holder, fencing token, expiry and last heartbeat. The leases page lists the
// live leases expiring soonest first; the dead page, the dead jobs with
// their errors. The jobs, dead and leases pages show neither payload nor
// checkpoint and ask their source for none (ListParams.OmitPayload; a
// Source's Leases returns none), so they cost the same whatever their
// size.
//
// Pages are rendered on the server (html/template) and read fine with
// JavaScript off. A small embedded script refreshes the page's content at
// an interval the operator picks (off, 2s, 5s, 15s; kept in
// localStorage; paused while the tab is hidden or jobs are ticked) and
// counts lease expiries down. Every asset is embedded: no request leaves
// the page's origin.
//
// # Safety
//
// Actions are POSTs, refused from other origins by
// net/http.CrossOriginProtection. Options.ReadOnly refuses every action
// and hides its buttons; Options.Authorize decides each page view and
// action (Action), and exact counts apart (CountExactly: a read of every
// job of a queue, which a role allowed only to view may be refused). Responses say noindex and may not be framed. Bad input
// (an unknown queue or job, a malformed cursor, an unknown state or
// action, a bad limit, a wrong method) gets an HTML page with its status
// and a message, never a 500; refusals of the backend (a job not
// finished, a leased job) are 409. GET healthz answers 200 "ok" when every
// source's Stats answers, else 503 with the error.
//
// # Sources
//
// A Source is one queue. Router adapts an in-process
// leaserouter.Router; Queue, one queue of a leaserouter.Client; Client,
// every queue of a Client:
//
//	h, err := console.New(console.Options{}, console.Client(client)...)
//
// pgrouter's Router, of any payload type, and its Client's queues have
// the method set of Source, so they are Sources as they are. One console
// shows several sources, by their Queue names.
//
// Sources written against an earlier version rename three methods: List,
// Leases and Get are now ListJSON, LeasesJSON and GetJSON, with the same
// signatures. The names say the payloads are JSON, and leave List, Leases
// and Get to a backend's typed Router, whose payloads are its own type:
// so a pgrouter.Router[T] of any T is a Source without a second Router of
// json.RawMessage on the same queue. Sources of an earlier version also
// gain RunNow (a scheduled job runs now) and LeasePageJSON, which pages
// the leases by a cursor and replaces LeasesJSON.
package console
