package leaserouter_test

import (
	"errors"
	"testing"
	"time"

	"github.com/leaserouter/leaserouter"
	"github.com/stretchr/testify/require"
)

// TestMetadataKeptAndCopied: a job's metadata is read back in Get, List
// and its lease, kept across a failed attempt and Retry, and Get returns
// a copy.
func TestMetadataKeptAndCopied(t *testing.T) {
	r := setup(t, leaserouter.Options{LeaseDuration: ld, Retention: time.Hour})
	md := map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
	require.NoError(t, r.Enqueue("a", "p", leaserouter.WithMetadata(md)))
	md["traceparent"] = "changed"
	want := map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
	require.Equal(t, want, get(t, r, "a").Metadata)
	got := get(t, r, "a").Metadata
	got["x"] = "y"
	require.Equal(t, want, get(t, r, "a").Metadata, "Get returns a copy")
	page, err := r.List(leaserouter.ListParams{})
	require.NoError(t, err)
	require.Equal(t, want, page.Jobs[0].Metadata)

	l := acquire(t, r, "w")
	require.Equal(t, want, l.Metadata())
	require.NoError(t, l.Fail(errors.New("boom")))
	require.NoError(t, r.Enqueue("b", "p"))
	require.Nil(t, get(t, r, "b").Metadata, "a job given none has nil Metadata")
}

// TestMetadataKeptByRetry: Retry makes a fresh record; the metadata goes
// with it.
func TestMetadataKeptByRetry(t *testing.T) {
	r := setup(t, leaserouter.Options{LeaseDuration: ld, Retention: time.Hour})
	require.NoError(t, r.Enqueue("a", "p", leaserouter.WithMetadata(map[string]string{"k": "v"})))
	require.NoError(t, acquire(t, r, "w").Complete())
	require.NoError(t, r.Retry("a"))
	require.Equal(t, map[string]string{"k": "v"}, acquire(t, r, "w").Metadata())
}

// TestRouterQueue: a Router serves DefaultQueue: WithQueue of it is
// accepted, any other refused; its jobs have kind "", which List filters.
func TestRouterQueue(t *testing.T) {
	r := setup(t, leaserouter.Options{LeaseDuration: ld})
	require.NoError(t, r.Enqueue("a", "p", leaserouter.WithQueue(leaserouter.DefaultQueue)))
	err := r.Enqueue("b", "p", leaserouter.WithQueue("other"))
	require.ErrorIs(t, err, leaserouter.ErrInvalidJob)
	require.ErrorContains(t, err, `this Router serves queue "default" only`)
	_, ok := r.Get("b")
	require.False(t, ok)
	require.Empty(t, get(t, r, "a").Kind)

	page, err := r.List(leaserouter.ListParams{Kinds: []string{""}})
	require.NoError(t, err)
	require.Len(t, page.Jobs, 1)
	page, err = r.List(leaserouter.ListParams{Kinds: []string{"email"}})
	require.NoError(t, err)
	require.Empty(t, page.Jobs)
	_, err = r.List(leaserouter.ListParams{Kinds: []string{"a\x00"}})
	require.ErrorIs(t, err, leaserouter.ErrInvalidOptions)

	qs, err := r.QueueStats(t.Context())
	require.NoError(t, err)
	require.Equal(t, []leaserouter.QueueStats{{Queue: leaserouter.DefaultQueue, Stats: r.Stats()}}, qs)
}
