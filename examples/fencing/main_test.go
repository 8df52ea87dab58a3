package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// record holds the trace keys the test checks; a key that is absent decodes
// as its zero value.
type record struct {
	Event        string `json:"event"`
	JobID        string `json:"job_id"`
	WorkerID     string `json:"worker_id"`
	Token        uint64 `json:"token"`
	Attempt      int    `json:"attempt"`
	StaleToken   uint64 `json:"stale_token"`
	CurrentToken uint64 `json:"current_token"`
	Reason       string `json:"reason"`
}

// runFencing runs the program in a synctest bubble: A's lease expires at an
// exact fake instant and the run takes no real time.
func runFencing(t *testing.T) string {
	t.Helper()
	var buf bytes.Buffer
	synctest.Test(t, func(t *testing.T) {
		require.Equal(t, 0, run(&buf, false), buf.String())
	})
	return buf.String()
}

func TestFencing(t *testing.T) {
	out := runFencing(t)
	t.Log("\n" + out)

	var recs []record
	for line := range strings.Lines(out) {
		var raw map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &raw), line)
		require.NotContains(t, raw, "time", "run(w, false) must drop the time key")
		var rec record
		require.NoError(t, json.Unmarshal([]byte(line), &rec), line)
		require.Equal(t, "charge-42", rec.JobID, line)
		recs = append(recs, rec)
	}

	var events []string
	for _, r := range recs {
		events = append(events, r.WorkerID+" "+r.Event)
	}
	require.Equal(t, []string{
		"worker-a lease_acquired",
		"worker-a execution_started",
		"worker-a worker_stalled",
		"worker-b lease_acquired",
		"worker-b execution_started",
		"worker-b write_committed",
		"worker-a stale_write_blocked",
		"worker-a completion_refused",
		"worker-a worker_exit",
		"worker-b completed",
		"worker-b worker_exit",
		"worker-b resource_write",
	}, events)

	a, b := recs[0].Token, recs[3].Token
	require.NotZero(t, a)
	require.Greater(t, b, a, "B's lease must carry a higher token than A's")
	require.Equal(t, 1, recs[0].Attempt)
	require.Equal(t, 2, recs[3].Attempt, "B's lease is the job's second attempt")

	blocked := recs[6]
	require.Equal(t, a, blocked.Token)
	require.Equal(t, a, blocked.StaleToken)
	require.Equal(t, b, blocked.CurrentToken)
	require.NotEmpty(t, blocked.Reason)

	refused := recs[7]
	require.Equal(t, a, refused.Token)
	require.Equal(t, b, refused.CurrentToken)
	require.Equal(t, "superseded", refused.Reason)

	require.Equal(t, "stale", recs[8].Reason)
	require.Equal(t, b, recs[9].Token)
	require.Equal(t, "success", recs[10].Reason)
	require.Equal(t, b, recs[11].Token, "the resource holds B's write only")
}

// TestFencingDeterministic: with the time key dropped, two runs print the
// same bytes.
func TestFencingDeterministic(t *testing.T) {
	require.Equal(t, runFencing(t), runFencing(t))
}
