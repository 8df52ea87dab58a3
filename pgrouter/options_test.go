package pgrouter_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
)

// TestOptionsZeroValueGetsDefaults: the zero Options is valid, every
// field getting its default: the core's for the fields every backend
// has, this backend's own for Queue and PollInterval.
func TestOptionsZeroValueGetsDefaults(t *testing.T) {
	o, err := pgrouter.OptionsWithDefaults(pgrouter.Options{})
	require.NoError(t, err)
	require.Equal(t, pgrouter.DefaultQueue, o.Queue)
	require.Equal(t, leaserouter.DefaultLeaseDuration, o.LeaseDuration)
	require.Equal(t, leaserouter.DefaultMaxAttempts, o.MaxAttempts)
	require.Equal(t, leaserouter.DefaultRetention, o.Retention)
	require.Equal(t, pgrouter.DefaultPollInterval, o.PollInterval)
	require.NotNil(t, o.Backoff)
}

// TestOptionsKeepsWhatIsGiven: a field given is kept as it is (a
// negative Retention included: finished jobs are dropped at once).
func TestOptionsKeepsWhatIsGiven(t *testing.T) {
	in := pgrouter.Options{Queue: "q", LeaseDuration: time.Minute, MaxAttempts: 7, Retention: -1,
		PollInterval: 3 * time.Second, Backoff: func(int) time.Duration { return time.Hour }}
	o, err := pgrouter.OptionsWithDefaults(in)
	require.NoError(t, err)
	require.Equal(t, "q", o.Queue)
	require.Equal(t, time.Minute, o.LeaseDuration)
	require.Equal(t, 7, o.MaxAttempts)
	require.Equal(t, time.Duration(-1), o.Retention)
	require.Equal(t, 3*time.Second, o.PollInterval)
	require.Equal(t, time.Hour, o.Backoff(1))
}

// TestOptionsRefusesBadFields: a field out of its range is an error
// wrapping ErrInvalidOptions that names the field, with no default
// filled in its place.
func TestOptionsRefusesBadFields(t *testing.T) {
	for _, c := range []struct {
		name  string
		o     pgrouter.Options
		field string
	}{
		{"negative PollInterval", pgrouter.Options{PollInterval: -time.Second}, "PollInterval"},
		{"Queue over MaxQueueBytes", pgrouter.Options{Queue: strings.Repeat("q", pgrouter.MaxQueueBytes+1)}, "MaxQueueBytes"},
		{"Queue holding NUL", pgrouter.Options{Queue: "a\x00b"}, "Queue"},
		{"Queue not UTF-8", pgrouter.Options{Queue: "a\xffb"}, "Queue"},
		{"LeaseDuration below MinLeaseDuration", pgrouter.Options{LeaseDuration: pgrouter.MinLeaseDuration - 1}, "LeaseDuration"},
		{"negative MaxAttempts", pgrouter.Options{MaxAttempts: -1}, "MaxAttempts"},
		{"MaxAttempts above the column's int4", pgrouter.Options{MaxAttempts: math.MaxInt32 + 1}, "MaxAttempts"},
		{"Kind over MaxIDBytes", pgrouter.Options{Kind: strings.Repeat("k", leaserouter.MaxIDBytes+1)}, "Kind"},
		{"Kind holding NUL", pgrouter.Options{Kind: "a\x00b"}, "Kind"},
		{"Kind not UTF-8", pgrouter.Options{Kind: "a\xffb"}, "Kind"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := pgrouter.OptionsWithDefaults(c.o)
			require.ErrorIs(t, err, leaserouter.ErrInvalidOptions)
			require.ErrorContains(t, err, c.field)
		})
	}
}
