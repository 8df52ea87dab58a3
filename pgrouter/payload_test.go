package pgrouter_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
)

// TestPayloadJSONBCannotStoreIsInvalidJob: a payload jsonb cannot store
// (a NUL character) is ErrInvalidJob, with its batch index; an escaped
// backslash before "u0000" is fine.
func TestPayloadJSONBCannotStoreIsInvalidJob(t *testing.T) {
	r, _ := newRouter[string](t, pgrouter.Options{})
	ctx := t.Context()
	require.ErrorIs(t, r.Enqueue(ctx, "a", "x\x00y"), leaserouter.ErrInvalidJob)
	_, err := r.EnqueueMany(ctx, []leaserouter.JobSpec[string]{{ID: "b", Payload: "ok"}, {ID: "c", Payload: "\x00"}})
	require.ErrorIs(t, err, leaserouter.ErrInvalidJob)
	require.ErrorContains(t, err, "batch index 1")
	require.NoError(t, r.Enqueue(ctx, "d", `\u0000`))
	j, _, err := r.Get(ctx, "d")
	require.NoError(t, err)
	require.Equal(t, `\u0000`, j.Payload)
}

// TestPayloadThatDoesNotDecodeFailsOnlyItsAttempt: a job whose payload
// this Router cannot decode fails its attempt; the other jobs of the
// batch are returned, their attempts untouched.
func TestPayloadThatDoesNotDecodeFailsOnlyItsAttempt(t *testing.T) {
	ints, db := newRouter[int](t, pgrouter.Options{MaxAttempts: 1})
	strs := routerOn[string](t, db, pgrouter.Options{MaxAttempts: 1})
	ctx := t.Context()
	require.NoError(t, ints.Enqueue(ctx, "good1", 1))
	require.NoError(t, strs.Enqueue(ctx, "bad", "not an int"))
	require.NoError(t, ints.Enqueue(ctx, "good2", 2))
	ls, err := ints.TryAcquireMany(ctx, "w", 10)
	require.NoError(t, err)
	require.Len(t, ls, 2)
	require.Equal(t, "good1", ls[0].JobID)
	require.Equal(t, "good2", ls[1].JobID)
	j, _, err := ints.Get(ctx, "good2")
	require.NoError(t, err)
	require.Equal(t, leaserouter.StateLeased, j.State)
	js, _, err := strs.Get(ctx, "bad")
	require.NoError(t, err)
	require.Equal(t, leaserouter.StateDead, js.State, "its one attempt failed")
	require.Contains(t, js.LastError, "does not decode")
}
