package main

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
)

// TestMigrateBringsAnEmptyDatabaseToTheSchema: a database without the
// schema is refused by the other subcommands with a hint, and migrate
// (idempotent) makes it usable.
func TestMigrateBringsAnEmptyDatabaseToTheSchema(t *testing.T) {
	d := newDB(t)
	ctx := t.Context()
	url, empty := emptyDB(t, d)

	res := cli(t, url, "stats")
	require.Equal(t, exitError, res.code, res.stderr)
	require.Contains(t, res.stderr, "run 'leaserouter migrate'")

	res = cli(t, url, "migrate")
	require.Equal(t, exitOK, res.code, res.stderr)
	require.Contains(t, res.stdout, "up to date")
	r, err := pgrouter.New[json.RawMessage](ctx, empty, pgrouter.Options{})
	require.NoError(t, err, "migrated")
	require.NoError(t, r.Close(ctx))

	var got map[string]bool
	db{url: url}.jsonOf(t, &got, "migrate")
	require.Equal(t, map[string]bool{"migrated": true}, got)
}

// TestQueuesAndStatsCountByState: queues lists every queue with its counts
// and pause; stats one queue's, as a table (the dead jobs under DEAD) and
// as JSON ("dead", and "failed" with the same count for one release).
func TestQueuesAndStatsCountByState(t *testing.T) {
	d := newDB(t)
	def, mail := d.router(t, pgrouter.DefaultQueue), d.router(t, "mail")
	kill(t, def, "dead-1", "boom")
	enqueue(t, def, "a", "b")
	lease(t, def, "a")
	enqueue(t, mail, "m")
	require.NoError(t, mail.Pause(t.Context()))

	out := d.ok(t, "queues")
	require.Regexp(t, `(?m)^QUEUE\s+PENDING\s+SCHEDULED\s+LEASED\s+SUCCEEDED\s+DEAD\s+CANCELED\s+PAUSED$`, out)
	require.Regexp(t, `(?m)^default\s+1\s+0\s+1\s+0\s+1\s+0\s+no$`, out)
	require.Regexp(t, `(?m)^mail\s+1\s+0\s+0\s+0\s+0\s+0\s+yes$`, out)

	var qs []queueJSON
	d.jsonOf(t, &qs, "queues")
	require.Equal(t, []queueJSON{
		{Queue: "default", counts: counts{Pending: 1, Leased: 1, Dead: 1, Failed: 1}},
		{Queue: "mail", counts: counts{Pending: 1}, Paused: true},
	}, qs)

	out = d.ok(t, "stats", "--queue", "mail")
	require.Regexp(t, `(?m)^mail\s+1\s+0\s+0\s+0\s+0\s+0\s+yes$`, out)
	var st queueJSON
	d.jsonOf(t, &st, "stats") // the default queue
	require.Equal(t, queueJSON{Queue: "default", counts: counts{Pending: 1, Leased: 1, Dead: 1, Failed: 1}}, st)
	require.Contains(t, d.ok(t, "stats", "--json"), `"dead": 1`)
}

// TestListPagesWithFilters: list pages newest first, prints the next
// cursor, which the next call follows; --state (repeated or
// comma-separated) and --prefix filter; flags may follow arguments. A
// dead job shows as dead; --state takes dead, and failed (its former
// name) as dead.
func TestListPagesWithFilters(t *testing.T) {
	d := newDB(t)
	r := d.router(t, pgrouter.DefaultQueue)
	kill(t, r, "img-dead", "decode: unexpected EOF\nat line 2")
	enqueue(t, r, "img-1", "img-2", "doc-1")
	require.NoError(t, r.Cancel(t.Context(), "img-2"))

	out := d.ok(t, "list", "--limit", "2")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 4, out) // header, 2 jobs, next page
	require.Regexp(t, `^ID\s+KIND\s+STATE\s+ATTEMPT\s+PRIORITY\s+TOKEN\s+OWNER\s+UPDATED\s+LAST ERROR$`, lines[0])
	require.Regexp(t, `^doc-1\s+-\s+pending\s+0/3\s+0\s+0\s+-\s+\S+ \S+\s+-$`, lines[1])
	require.Regexp(t, `^img-2\s+-\s+canceled\s`, lines[2])
	m := regexp.MustCompile(`^next page: --cursor (\S+)$`).FindStringSubmatch(lines[3])
	require.NotNil(t, m, lines[3])

	out = d.ok(t, "list", "--limit", "2", "--cursor", m[1])
	require.Regexp(t, `(?m)^img-1\s+-\s+pending\s`, out)
	require.Regexp(t, `(?m)^img-dead\s+-\s+dead\s+1/3\s+0\s+[1-9]\d*\s+-\s+\S+ \S+\s+decode: unexpected EOF at line 2$`, out,
		"the error on one line")
	require.NotContains(t, out, "next page")

	var page pageJSON
	d.jsonOf(t, &page, "list", "--state", "failed,canceled")
	require.Equal(t, []string{"img-2", "img-dead"}, ids(page.Jobs))
	require.Empty(t, page.NextCursor)
	dead := page.Jobs[1]
	require.Equal(t, "dead", dead.State)
	require.JSONEq(t, `{"n":0}`, string(dead.Payload))
	require.Equal(t, "decode: unexpected EOF\nat line 2", dead.LastError)
	require.Equal(t, "default", dead.Queue)

	d.jsonOf(t, &page, "list", "--state", "pending", "--state", "dead", "--prefix", "img-")
	require.Equal(t, []string{"img-1", "img-dead"}, ids(page.Jobs))

	d.jsonOf(t, &page, "list", "--limit", "1")
	require.Equal(t, []string{"doc-1"}, ids(page.Jobs))
	var next pageJSON
	d.jsonOf(t, &next, "list", "--limit", "3", "--cursor", page.NextCursor)
	require.Equal(t, []string{"img-2", "img-1", "img-dead"}, ids(next.Jobs), "a cursor stays valid with another limit")

	d.jsonOf(t, &page, "list", "--queue", "nowhere")
	require.Empty(t, page.Jobs)
	require.NotNil(t, page.Jobs, `"jobs": [] for scripts`)
	require.Contains(t, d.ok(t, "list", "--queue", "nowhere"), "(no jobs)")
}

func ids(js []jobJSON) []string {
	var out []string
	for _, j := range js {
		out = append(out, j.ID)
	}
	return out
}

// TestGetShowsTheJobAndItsLease: get prints every field, the lease's
// holder and token included, and the payload; --json the same.
func TestGetShowsTheJobAndItsLease(t *testing.T) {
	d := newDB(t)
	r := d.router(t, "files")
	enqueue(t, r, "img-1.png")
	l := lease(t, r, "img-1.png")
	require.NoError(t, l.Heartbeat(t.Context(), []byte("page 3")))

	out := d.ok(t, "get", "img-1.png", "--queue", "files")
	require.Regexp(t, `(?m)^state\s+leased$`, out)
	require.Regexp(t, `(?m)^attempt\s+1 of 3$`, out)
	require.Regexp(t, `(?m)^owner\s+w$`, out)
	require.Regexp(t, `(?m)^token\s+`+strconv.FormatUint(uint64(l.Token), 10)+`$`, out)
	require.Regexp(t, `(?m)^lease expiry\s+\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}Z$`, out)
	require.Regexp(t, `(?m)^progress\s+page 3$`, out)
	require.Contains(t, out, "payload:\n  {\n    \"n\": 0\n  }\n")

	var j jobJSON
	d.jsonOf(t, &j, "get", "--queue=files", "img-1.png")
	want := jobOf("files", job(t, r, "img-1.png"))
	require.JSONEq(t, string(want.Payload), string(j.Payload))
	want.Payload, j.Payload = nil, nil
	require.Equal(t, want, j)
	require.Equal(t, "leased", j.State)
	require.Equal(t, uint64(l.Token), j.Token)
	require.Equal(t, []byte("page 3"), j.Progress)
	require.False(t, j.LeaseExpiry.IsZero())
	require.Regexp(t, `(?m)^timeout\s+-$`, out, "none set")
	require.Empty(t, j.Timeout)
}

// TestGetShowsEveryFailedAttempt: get prints each failed attempt's
// record, oldest first (its number, instant, worker and error), after
// the last error; --json carries them as the job's errors.
func TestGetShowsEveryFailedAttempt(t *testing.T) {
	d := newDB(t)
	r := d.router(t, "files")
	enqueue(t, r, "x")
	require.NoError(t, lease(t, r, "x").Fail(t.Context(), errors.New("timeout talking to S3")))
	require.NoError(t, r.RunNow(t.Context(), "x")) // past its backoff
	require.NoError(t, lease(t, r, "x").Fail(t.Context(), errors.New("disk\tfull")))

	out := d.ok(t, "get", "x", "--queue", "files")
	require.Regexp(t, `(?m)^attempt 1 error\s+\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}Z by w: timeout talking to S3\n`+
		`attempt 2 error\s+\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}Z by w: disk full$`, out)
	var j jobJSON
	d.jsonOf(t, &j, "get", "--queue=files", "x")
	require.Len(t, j.Errors, 2)
	require.Equal(t, []int{1, 2}, []int{j.Errors[0].Attempt, j.Errors[1].Attempt})
	require.Equal(t, "w", j.Errors[1].Worker)
	require.Equal(t, "disk\tfull", j.Errors[1].Error)
	require.False(t, j.Errors[1].At.Before(j.Errors[0].At))
}

// TestGetShowsTheJobsTimeout: get prints the limit WithTimeout set on
// each attempt, as Go writes a duration; --json the same.
func TestGetShowsTheJobsTimeout(t *testing.T) {
	d := newDB(t)
	r := d.router(t, "files")
	require.NoError(t, r.Enqueue(t.Context(), "slow", json.RawMessage(`{}`), leaserouter.WithTimeout(90*time.Second)))
	require.Regexp(t, `(?m)^timeout\s+1m30s$`, d.ok(t, "get", "slow", "--queue", "files"))
	var j jobJSON
	d.jsonOf(t, &j, "get", "--queue=files", "slow")
	require.Equal(t, "1m30s", j.Timeout)
}

// TestActionsChangeJobs: retry, cancel and delete act on every ID given,
// and pause and resume on the queue, as the Router then sees.
func TestActionsChangeJobs(t *testing.T) {
	d := newDB(t)
	r := d.router(t, pgrouter.DefaultQueue)
	kill(t, r, "d1", "boom")
	kill(t, r, "d2", "boom")
	enqueue(t, r, "p1", "p2", "p3")

	require.Equal(t, "retried d1\nretried d2\n", d.ok(t, "retry", "d1", "d2"))
	require.Equal(t, leaserouter.StatePending, job(t, r, "d1").State)
	require.Equal(t, leaserouter.StatePending, job(t, r, "d2").State)

	var act actionJSON
	d.jsonOf(t, &act, "cancel", "p1", "d1")
	require.Equal(t, actionJSON{Queue: "default", Action: "cancel", Results: []resultJSON{{ID: "p1", OK: true}, {ID: "d1", OK: true}}}, act)
	require.Equal(t, leaserouter.StateCanceled, job(t, r, "p1").State)
	require.Equal(t, leaserouter.StateCanceled, job(t, r, "d1").State)

	require.Equal(t, "canceled p2\n", d.ok(t, "cancel", "p2"))
	require.Equal(t, leaserouter.StateCanceled, job(t, r, "p2").State)

	require.Equal(t, "deleted p1\n", d.ok(t, "delete", "p1"))
	d.jsonOf(t, &act, "delete", "p2", "p3")
	require.Equal(t, actionJSON{Queue: "default", Action: "delete", Results: []resultJSON{{ID: "p2", OK: true}, {ID: "p3", OK: true}}}, act)
	for _, id := range []string{"p1", "p2", "p3"} {
		_, ok, err := r.Get(t.Context(), id)
		require.NoError(t, err)
		require.False(t, ok, "deleted %s", id)
	}

	require.Equal(t, "queue \"default\" paused\n", d.ok(t, "pause"))
	st, err := r.Stats(t.Context())
	require.NoError(t, err)
	require.True(t, st.Paused)
	_, err = r.TryAcquire(t.Context(), "w")
	require.ErrorIs(t, err, leaserouter.ErrNoJob, "paused: no grant")
	require.Equal(t, "queue \"default\" resumed\n", d.ok(t, "resume"))
	st, err = r.Stats(t.Context())
	require.NoError(t, err)
	require.False(t, st.Paused)
	var paused map[string]any
	d.jsonOf(t, &paused, "pause")
	require.Equal(t, map[string]any{"queue": "default", "paused": true}, paused)
	st, err = r.Stats(t.Context())
	require.NoError(t, err)
	require.True(t, st.Paused)
	d.jsonOf(t, &paused, "resume")
	require.Equal(t, map[string]any{"queue": "default", "paused": false}, paused)
	st, err = r.Stats(t.Context())
	require.NoError(t, err)
	require.False(t, st.Paused)
}

// TestRefusalsChangeNothing: an unknown job, a retry of a pending job and
// a delete of a leased job fail with exit status 1 and the reason on
// stderr, leave the job as it was, and the other IDs of the call are done.
func TestRefusalsChangeNothing(t *testing.T) {
	d := newDB(t)
	r := d.router(t, pgrouter.DefaultQueue)
	kill(t, r, "dead", "boom")
	enqueue(t, r, "held", "waiting")
	lease(t, r, "held")
	held, waiting := job(t, r, "held"), job(t, r, "waiting")

	res := cli(t, d.url, "get", "ghost")
	require.Equal(t, exitError, res.code)
	require.Contains(t, res.stderr, "not found")
	require.Empty(t, res.stdout)

	res = cli(t, d.url, "retry", "waiting")
	require.Equal(t, exitError, res.code)
	require.Contains(t, res.stderr, leaserouter.ErrNotFinished.Error())
	require.Contains(t, res.stderr, "is pending")
	require.Equal(t, waiting, job(t, r, "waiting"), "nothing changed")

	res = cli(t, d.url, "delete", "held")
	require.Equal(t, exitError, res.code)
	require.Contains(t, res.stderr, leaserouter.ErrLeased.Error())
	require.Equal(t, held, job(t, r, "held"), "nothing changed")

	res = cli(t, d.url, "retry", "--json", "ghost", "dead")
	require.Equal(t, exitError, res.code)
	require.Contains(t, res.stderr, "ghost: leaserouter: job not found")
	require.Contains(t, res.stderr, "1 of 2 jobs refused")
	var act actionJSON
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &act), res.stdout)
	require.Len(t, act.Results, 2)
	require.False(t, act.Results[0].OK)
	require.Contains(t, act.Results[0].Error, "not found")
	require.Equal(t, resultJSON{ID: "dead", OK: true}, act.Results[1])
	require.Equal(t, leaserouter.StatePending, job(t, r, "dead").State, "the other ID was retried")

	res = cli(t, d.url, "cancel", "ghost")
	require.Equal(t, exitError, res.code)
	require.Contains(t, res.stderr, "not found")
	require.Equal(t, held, job(t, r, "held"))
	require.Equal(t, waiting, job(t, r, "waiting"))
}

// TestBadInputIsAUsageError: a malformed cursor, an unknown state, an
// unknown flag or subcommand, a missing argument or database URL: exit
// status 2, a message on stderr, nothing on stdout, nothing changed.
func TestBadInputIsAUsageError(t *testing.T) {
	d := newDB(t)
	r := d.router(t, pgrouter.DefaultQueue)
	kill(t, r, "dead", "boom")
	before := job(t, r, "dead")
	for _, tc := range []struct {
		url  string
		args []string
		msg  string
	}{
		{d.url, []string{"list", "--cursor", "not-a-cursor"}, "Cursor"},
		{d.url, []string{"list", "--state", "failed", "--cursor", cursorOf(t, d)}, "Cursor"}, // made under other filters
		{d.url, []string{"list", "--state", "zombie"}, `unknown state "zombie"`},
		{d.url, []string{"list", "--kind", "email,"}, `invalid value "email," for flag -kind: an empty kind in a list`}, // not also kind "": that is --kind "" alone
		{d.url, []string{"list", "--kind", "a,,b"}, "an empty kind in a list"},
		{d.url, []string{"list", "--limit", "5000"}, "--limit 5000"},
		{d.url, []string{"retry", "--force", "dead"}, "flag provided but not defined: -force"},
		{d.url, []string{"retry"}, "at least one ID"},
		{d.url, []string{"get", "a", "b"}, "takes one ID, got 2"},
		{d.url, []string{"pause", "extra"}, "takes no arguments"},
		{d.url, []string{"resurrect", "dead"}, `unknown subcommand "resurrect"`},
		{"", []string{"retry", "dead"}, "no database: set $DATABASE_URL or pass --database-url"},
		{"", []string{"migrate"}, "no database"},
		{d.url, []string{"stats", "--database-url", "postgres://[::1"}, "--database-url"},
	} {
		res := cli(t, tc.url, tc.args...)
		require.Equal(t, exitUsage, res.code, "%q: %s", tc.args, res.stderr)
		require.Contains(t, res.stderr, tc.msg, "%q", tc.args)
		require.Empty(t, res.stdout, "%q", tc.args)
	}
	require.Equal(t, before, job(t, r, "dead"), "nothing changed")
	res := cli(t, "", "list")
	require.Equal(t, exitUsage, res.code)
	require.Equal(t, "leaserouter list: no database: set $DATABASE_URL or pass --database-url\nrun 'leaserouter help list' for usage\n", res.stderr)
}

// cursorOf is a cursor of a list of every state of d's default queue.
func cursorOf(t *testing.T, d db) string {
	r := d.router(t, pgrouter.DefaultQueue)
	enqueue(t, r, "c1", "c2")
	var page pageJSON
	d.jsonOf(t, &page, "list", "--limit", "1")
	require.NotEmpty(t, page.NextCursor)
	return page.NextCursor
}

// TestUnreachableDatabaseIsAnOperationError: exit status 1 with the
// driver's reason.
func TestUnreachableDatabaseIsAnOperationError(t *testing.T) {
	for _, args := range [][]string{{"stats"}, {"migrate"}, {"retry", "x"}, {"console", "--addr", "127.0.0.1:0"}} {
		res := cli(t, "host=127.0.0.1 port=1 dbname=nowhere user=nobody sslmode=disable connect_timeout=5", args...)
		require.Equal(t, exitError, res.code, "%q: %s", args, res.stderr)
		require.Contains(t, res.stderr, "connect", "%q", args)
		require.Contains(t, res.stderr, "leaserouter "+args[0]+": ", "%q", args)
		require.Empty(t, res.stdout, "%q", args)
	}
}

// TestHelpExitsZero: help, --help and a subcommand's --help print the
// usage on stdout with exit status 0; no subcommand at all is a usage
// error.
func TestHelpExitsZero(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"--help"}, {"-h"}} {
		res := cli(t, "", args...)
		require.Equal(t, exitOK, res.code, "%q", args)
		require.Empty(t, res.stderr)
		for _, cmd := range commands {
			require.Regexp(t, `(?m)^  `+cmd.name+` +\S`, res.stdout, "%q lists %s", args, cmd.name)
		}
	}
	for _, args := range [][]string{{"help", "list"}, {"list", "--help"}, {"list", "-h"}} {
		res := cli(t, "", args...)
		require.Equal(t, exitOK, res.code, "%q: %s", args, res.stderr)
		require.Contains(t, res.stdout, "usage: leaserouter list [flags]")
		require.Contains(t, res.stdout, "-cursor string")
		require.Contains(t, res.stdout, "-state value")
	}
	res := cli(t, "postgres://u:secret@h/db", "help", "stats")
	require.NotContains(t, res.stdout, "secret", "the usage never shows $DATABASE_URL")
	res = cli(t, "", "help", "nope")
	require.Equal(t, exitUsage, res.code)
	res = cli(t, "")
	require.Equal(t, exitUsage, res.code)
	require.Contains(t, res.stderr, "usage: leaserouter SUBCOMMAND")
}

// TestPauseRefusesAQueueThatDoesNotExist: pause and resume of a queue
// with no jobs that was never paused (a typo) fail with the error on
// stderr and create no queue; --create makes it all the same.
func TestPauseRefusesAQueueThatDoesNotExist(t *testing.T) {
	d := newDB(t)
	enqueue(t, d.router(t, "mail"), "m")
	for _, cmd := range []string{"pause", "resume"} {
		res := cli(t, d.url, cmd, "--queue", "nosuchqueue")
		require.Equal(t, exitError, res.code, "%s: %s", cmd, res.stdout)
		require.Empty(t, res.stdout, cmd)
		require.Contains(t, res.stderr, `"nosuchqueue"`, cmd)
		require.Contains(t, res.stderr, "--create", cmd)
	}
	var qs []queueJSON
	d.jsonOf(t, &qs, "queues")
	require.Equal(t, []queueJSON{{Queue: "mail", counts: counts{Pending: 1}}}, qs, "no phantom queue")

	require.Equal(t, "queue \"mail\" paused\n", d.ok(t, "pause", "--queue", "mail"), "a queue with jobs")
	require.Equal(t, "queue \"soon\" paused\n", d.ok(t, "pause", "--queue", "soon", "--create"))
	require.Equal(t, "queue \"soon\" resumed\n", d.ok(t, "resume", "--queue", "soon"), "a queue with a row")
	d.jsonOf(t, &qs, "queues")
	require.Equal(t, []queueJSON{{Queue: "mail", counts: counts{Pending: 1}, Paused: true}, {Queue: "soon"}}, qs)
}

// TestListByKindAndGetShowsKindAndMetadata: list --kind (repeated or
// comma-separated; "" for a Router's jobs) selects jobs by kind and shows
// each one's; get prints the kind and the metadata; --json the same.
func TestListByKindAndGetShowsKindAndMetadata(t *testing.T) {
	d := newDB(t)
	ctx := t.Context()
	r := d.router(t, pgrouter.DefaultQueue)
	emails, err := pgrouter.New[json.RawMessage](ctx, d.pool, pgrouter.Options{Kind: "email"})
	require.NoError(t, err)
	defer func() { require.NoError(t, emails.Close(context.Background())) }()
	sms, err := pgrouter.New[json.RawMessage](ctx, d.pool, pgrouter.Options{Kind: "sms"})
	require.NoError(t, err)
	defer func() { require.NoError(t, sms.Close(context.Background())) }()
	enqueue(t, r, "plain")
	require.NoError(t, emails.Enqueue(ctx, "e1", json.RawMessage(`{}`), leaserouter.WithMetadata(map[string]string{"tenant": "t1", "b": "2"})))
	require.NoError(t, sms.Enqueue(ctx, "s1", json.RawMessage(`{}`)))

	var page pageJSON
	d.jsonOf(t, &page, "list", "--kind", "email,sms")
	require.Equal(t, []string{"s1", "e1"}, ids(page.Jobs))
	d.jsonOf(t, &page, "list", "--kind", "email", "--kind", "")
	require.Equal(t, []string{"e1", "plain"}, ids(page.Jobs))
	require.Equal(t, "email", page.Jobs[0].Kind)
	require.Equal(t, map[string]string{"tenant": "t1", "b": "2"}, page.Jobs[0].Metadata)
	out := d.ok(t, "list", "--kind", "sms")
	require.Regexp(t, `(?m)^s1\s+sms\s+pending\s`, out)

	out = d.ok(t, "get", "e1")
	require.Regexp(t, `(?m)^kind\s+email$`, out)
	require.Regexp(t, `(?m)^metadata b\s+2\nmetadata tenant\s+t1$`, out, "sorted by key")
	require.Regexp(t, `(?m)^kind\s+-$`, d.ok(t, "get", "plain"))
	var j jobJSON
	d.jsonOf(t, &j, "get", "e1")
	require.Equal(t, "email", j.Kind)
	require.Equal(t, map[string]string{"tenant": "t1", "b": "2"}, j.Metadata)
}
