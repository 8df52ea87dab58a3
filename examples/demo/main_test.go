package main

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// event is one parsed line of the trace.
type event struct {
	at, kind, job, worker, token string
	attempt                      int
	err                          string
}

// output is the parsed output of run.
type output struct {
	events   []event
	late     string
	snapshot map[string]string // job ID -> "state=... attempt=... ..."
}

// runDemo runs the program in a synctest bubble: time is fake, so the lease
// expiries happen at exact instants and the run takes no real time.
func runDemo(t *testing.T) string {
	t.Helper()
	var buf bytes.Buffer
	synctest.Test(t, func(t *testing.T) {
		require.Equal(t, 0, run(&buf), buf.String())
	})
	return buf.String()
}

func parse(t *testing.T, out string) output {
	t.Helper()
	o := output{snapshot: map[string]string{}}
	section := ""
	for line := range strings.Lines(out) {
		line = strings.TrimSuffix(line, "\n")
		if strings.HasPrefix(line, "== ") {
			section = strings.Fields(line)[1]
			continue
		}
		switch section {
		case "events":
			o.events = append(o.events, parseEvent(t, line))
		case "late":
			o.late = line
		case "final":
			id, rest, ok := strings.Cut(line, ": ")
			require.True(t, ok, line)
			o.snapshot[id] = rest
		default:
			t.Fatalf("line outside any section: %q", line)
		}
	}
	return o
}

func parseEvent(t *testing.T, line string) event {
	t.Helper()
	head, errText, ok := strings.Cut(line, " err=")
	require.True(t, ok, line)
	f := strings.Fields(head)
	require.Len(t, f, 6, line)
	val := func(i int, key string) string {
		v, ok := strings.CutPrefix(f[i], key+"=")
		require.True(t, ok, "field %d of %q is not %s=", i, line, key)
		return v
	}
	attempt, err := strconv.Atoi(val(5, "attempt"))
	require.NoError(t, err, line)
	return event{
		at: f[0], kind: f[1], job: val(2, "job"), worker: val(3, "worker"),
		token: val(4, "token"), attempt: attempt, err: errText,
	}
}

// find returns the index of the first event of job with the given kind and
// worker, failing the test if there is none.
func (o output) find(t *testing.T, job, kind, worker string) int {
	t.Helper()
	for i, e := range o.events {
		if e.job == job && e.kind == kind && e.worker == worker {
			return i
		}
	}
	t.Fatalf("no %s event for %s by %s in %+v", kind, job, worker, o.events)
	return -1
}

func TestDemo(t *testing.T) {
	out := runDemo(t)
	t.Log("\n" + out)
	o := parse(t, out)

	// job-A: quick, done on its first attempt.
	i := o.find(t, "job-A", "completed", "worker-1")
	require.Equal(t, 1, o.events[i].attempt)
	require.Equal(t, "state=succeeded attempt=1 token=#1 owner=- last_error=-", o.snapshot["job-A"])

	// job-B: worker-2's lease expires at exactly one lease, worker-4 leases
	// the job again with a higher token, worker-2's late Complete is refused,
	// and worker-4 completes the job.
	acq1 := o.find(t, "job-B", "lease_acquired", "worker-2")
	exp := o.find(t, "job-B", "lease_expired", "worker-2")
	acq2 := o.find(t, "job-B", "lease_acquired", "worker-4")
	stale := o.find(t, "job-B", "stale_rejected", "worker-2")
	done := o.find(t, "job-B", "completed", "worker-4")
	require.Equal(t, "+0.300s", o.events[exp].at)
	require.Less(t, acq1, exp)
	require.Less(t, exp, acq2)
	require.Less(t, acq2, stale)
	require.Less(t, stale, done)
	require.Equal(t, "#2", o.events[acq1].token)
	require.Equal(t, "#4", o.events[acq2].token)
	require.Equal(t, 2, o.events[acq2].attempt)
	require.Equal(t, "#2", o.events[stale].token, "stale_rejected carries the refused lease's token")
	require.Equal(t, "lease lost: token #2, current #4 (superseded)", o.events[stale].err)
	require.Equal(t, "job-B: Complete returned lease lost: token #2, current #4 (superseded) (ErrLeaseLost: true)", o.late)
	require.Equal(t, "state=succeeded attempt=2 token=#4 owner=- last_error=lease expired", o.snapshot["job-B"])

	// job-C: worker-3 crashes holding the lease; it expires one lease after
	// it was granted and worker-4 retries the job successfully.
	acq1 = o.find(t, "job-C", "lease_acquired", "worker-3")
	exp = o.find(t, "job-C", "lease_expired", "worker-3")
	acq2 = o.find(t, "job-C", "lease_acquired", "worker-4")
	done = o.find(t, "job-C", "completed", "worker-4")
	require.Equal(t, "+0.150s", o.events[acq1].at)
	require.Equal(t, "+0.450s", o.events[exp].at)
	require.Less(t, acq1, exp)
	require.Less(t, exp, acq2)
	require.Less(t, acq2, done)
	require.Equal(t, "state=succeeded attempt=2 token=#5 owner=- last_error=lease expired", o.snapshot["job-C"])

	// job-D: outlives one lease thanks to heartbeats; never expires.
	extended := 0
	for _, e := range o.events {
		if e.job == "job-D" {
			require.NotEqual(t, "lease_expired", e.kind)
			if e.kind == "lease_extended" {
				extended++
			}
		}
	}
	require.Equal(t, 3, extended)
	i = o.find(t, "job-D", "completed", "runner-0")
	require.Equal(t, "+0.800s", o.events[i].at)
	require.Equal(t, "state=succeeded attempt=1 token=#6 owner=- last_error=-", o.snapshot["job-D"])

	// No job was ever acquired twice under one token, and tokens grow in
	// the order leases were granted.
	var tokens []string
	for _, e := range o.events {
		if e.kind == "lease_acquired" {
			tokens = append(tokens, e.token)
		}
	}
	require.Equal(t, []string{"#1", "#2", "#3", "#4", "#5", "#6"}, tokens)
}

// TestDemoDeterministic: with fake time and channel orchestration, two runs
// print exactly the same bytes, apart from the first token's actual value.
func TestDemoDeterministic(t *testing.T) {
	strip := func(s string) string {
		_, rest, ok := strings.Cut(s, "\n")
		require.True(t, ok)
		return rest
	}
	require.Equal(t, strip(runDemo(t)), strip(runDemo(t)))
}
