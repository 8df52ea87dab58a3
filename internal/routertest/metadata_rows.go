package routertest

import (
	"fmt"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
)

// A job's metadata (WithMetadata), kind and queue, a row per rule, on
// every backend.

func metadataRows() []Row {
	return []Row{rowMetadataKept, rowMetadataListedAndRetried, rowMetadataLimitsInBatch, rowQueueOwnOnly}
}

// traceMD is a metadata map as the tracing middleware writes one.
func traceMD() map[string]string {
	return map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tenant": "t1"}
}

// rowMetadataKept: WithMetadata's pairs are read back in Get (a copy: the
// caller's map may change after Enqueue, and the returned one is the
// caller's own) and in every lease of the job, kept across a failed
// attempt and a Snooze; a job given none has nil Metadata.
var rowMetadataKept = Row{Name: "metadata/read back in Get and the lease; kept across a failed attempt and Snooze", Test: func(t T, h Harness) {
	b := open(t, h, Config{})
	ctx := ctxOf(t)
	md := traceMD()
	require.NoError(t, b.Enqueue(ctx, "a", "p", leaserouter.WithMetadata(md)))
	md["tenant"] = "changed after Enqueue"
	require.NoError(t, b.Enqueue(ctx, "b", "p", leaserouter.WithPriority(-1)))
	want := traceMD()
	j := get(t, b, "a")
	require.Equal(t, want, j.Metadata)
	j.Metadata["x"] = "y"
	require.Equal(t, want, get(t, b, "a").Metadata, "Get returns a copy")
	require.Nil(t, get(t, b, "b").Metadata, "a job given none has nil Metadata")

	l := tryAcquire(t, b, "w")
	require.Equal(t, "a", l.JobID())
	require.Equal(t, want, l.Metadata())
	require.NoError(t, l.Fail(ctx, errBoom))
	l = tryAcquire(t, b, "w")
	require.Equal(t, "a", l.JobID())
	require.Equal(t, 2, l.Attempt())
	require.Equal(t, want, l.Metadata(), "kept across a failed attempt")
	require.NoError(t, l.Snooze(ctx, time.Millisecond))
	h.Advance(2 * time.Millisecond)
	l = tryAcquire(t, b, "w")
	require.Equal(t, "a", l.JobID())
	require.Equal(t, want, l.Metadata(), "kept across a Snooze")
	require.Equal(t, want, get(t, b, "a").Metadata)
	lb := tryAcquire(t, b, "w")
	require.Equal(t, "b", lb.JobID())
	require.Nil(t, lb.Metadata())
}}

// rowMetadataListedAndRetried: List returns a job's metadata (with
// OmitPayload too: it leaves out Payload and Progress, whose size is
// unbounded; metadata is at most MaxMetadataBytes), Retry keeps it, and a Router's jobs have kind "", which
// ListParams.Kinds filters.
var rowMetadataListedAndRetried = Row{Name: "metadata/listed, kept by Retry; a Router's jobs have kind \"\", filtered by ListParams.Kinds", Test: func(t T, h Harness) {
	b := open(t, h, Config{Retention: time.Hour})
	a := admin(t, b)
	ctx := ctxOf(t)
	require.NoError(t, b.Enqueue(ctx, "a", "p", leaserouter.WithMetadata(traceMD())))
	require.NoError(t, b.Enqueue(ctx, "b", "p"))
	page, err := a.List(ctx, leaserouter.ListParams{})
	require.NoError(t, err)
	require.Len(t, page.Jobs, 2)
	require.Equal(t, "b", page.Jobs[0].ID)
	require.Nil(t, page.Jobs[0].Metadata)
	require.Equal(t, traceMD(), page.Jobs[1].Metadata)
	for _, j := range page.Jobs {
		require.Equal(t, "", j.Kind, "a Router's jobs have kind \"\"")
	}
	page, err = a.List(ctx, leaserouter.ListParams{OmitPayload: true})
	require.NoError(t, err)
	require.Equal(t, traceMD(), page.Jobs[1].Metadata, "OmitPayload leaves out Payload and Progress, not the metadata (small)")

	page, err = a.List(ctx, leaserouter.ListParams{Kinds: []string{""}})
	require.NoError(t, err)
	require.Len(t, page.Jobs, 2)
	page, err = a.List(ctx, leaserouter.ListParams{Kinds: []string{"email"}})
	require.NoError(t, err)
	require.Empty(t, page.Jobs)
	_, err = a.List(ctx, leaserouter.ListParams{Kinds: []string{"a\x00"}})
	require.ErrorIs(t, err, leaserouter.ErrInvalidOptions)

	for range 2 {
		l := tryAcquire(t, b, "w")
		require.NoError(t, l.Complete(ctx))
	}
	require.NoError(t, a.Retry(ctx, "a"))
	l := tryAcquire(t, b, "w")
	require.Equal(t, "a", l.JobID())
	require.Equal(t, traceMD(), l.Metadata(), "kept by Retry")
	require.Equal(t, traceMD(), get(t, b, "a").Metadata)
}}

// rowMetadataLimitsInBatch: metadata over the limits (more than
// MaxMetadataPairs pairs, more than MaxMetadataBytes, an empty key, a
// NUL) is ErrInvalidJob; in EnqueueMany the error names the job's batch
// index and nothing is enqueued.
var rowMetadataLimitsInBatch = Row{Name: "metadata/over the limits: ErrInvalidJob, naming the batch index, nothing enqueued", Test: func(t T, h Harness) {
	b := open(t, h, Config{})
	ctx := ctxOf(t)
	many := map[string]string{}
	for i := range leaserouter.MaxMetadataPairs + 1 {
		many[fmt.Sprint("k", i)] = "v"
	}
	big := map[string]string{"k": fmt.Sprintf("%0*d", leaserouter.MaxMetadataBytes, 0)} // key and value: one byte over
	for name, md := range map[string]map[string]string{"pairs": many, "bytes": big, "empty key": {"": "v"}, "NUL": {"k": "a\x00b"}} {
		err := b.Enqueue(ctx, "one", "p", leaserouter.WithMetadata(md))
		require.ErrorIs(t, err, leaserouter.ErrInvalidJob, name)
		_, err = b.EnqueueMany(ctx, []leaserouter.JobSpec[string]{{ID: "x"}, {ID: "y", Options: []leaserouter.EnqueueOption{leaserouter.WithMetadata(md)}}})
		require.ErrorIs(t, err, leaserouter.ErrInvalidJob, name)
		require.ErrorContains(t, err, "(batch index 1)", name)
	}
	for _, id := range []string{"one", "x", "y"} {
		_, ok, err := b.Get(ctx, id)
		require.NoError(t, err)
		require.False(t, ok, "%s: nothing enqueued", id)
	}
}}

// rowQueueOwnOnly: a Router serves its own queue: WithQueue naming it is
// accepted, naming another is ErrInvalidJob (one message on every
// backend) and stores nothing.
var rowQueueOwnOnly = Row{Name: "queue/WithQueue of the Router's own queue accepted, of another refused", Test: func(t T, h Harness) {
	b := open(t, h, Config{})
	ctx := ctxOf(t)
	require.NoError(t, b.Enqueue(ctx, "a", "p", leaserouter.WithQueue(leaserouter.DefaultQueue)))
	err := b.Enqueue(ctx, "b", "p", leaserouter.WithQueue("other"))
	require.ErrorIs(t, err, leaserouter.ErrInvalidJob)
	require.ErrorContains(t, err, `WithQueue("other") for job "b": this Router serves queue "default" only`)
	_, err = b.EnqueueMany(ctx, []leaserouter.JobSpec[string]{{ID: "c"}, {ID: "d", Options: []leaserouter.EnqueueOption{leaserouter.WithQueue("other")}}})
	require.ErrorIs(t, err, leaserouter.ErrInvalidJob)
	require.ErrorContains(t, err, "(batch index 1)")
	for _, id := range []string{"b", "c", "d"} {
		_, ok, err := b.Get(ctx, id)
		require.NoError(t, err)
		require.False(t, ok, "%s: nothing enqueued", id)
	}
	require.True(t, get(t, b, "a").State == leaserouter.StatePending)
}}
