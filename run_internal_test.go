package leaserouter

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestLeaseCtxLiveReadsWithoutRacingAStop: live reads a handler
// context's state without its lock (once per job Run runs), so a stop
// never writes a state it stored: a made context stopped while another
// goroutine asks whether it is live is seen live, then stopped, with the
// stop's cause (run with -race: a write in place is a data race).
func TestLeaseCtxLiveReadsWithoutRacingAStop(t *testing.T) {
	parent := context.Background()
	lost := errors.New("lost")
	for _, end := range []func(c *leaseCtx){
		func(c *leaseCtx) { c.stop(lost) },
		func(c *leaseCtx) { require.NoError(t, c.returned()) },
	} {
		for range 50 {
			c := &leaseCtx{parent: &parent}
			made := c.ctx() // made: a state of its own
			watched := make(chan struct{})
			go func() {
				defer close(watched)
				for c.live() {
				}
			}()
			end(c)
			<-watched
			require.False(t, c.live())
			require.Error(t, made.Err())
			require.Same(t, made, c.ctx(), "made once")
		}
	}
	c := &leaseCtx{parent: &parent}
	_ = c.ctx()
	c.stop(lost)
	require.ErrorIs(t, context.Cause(c.ctx()), lost)
	require.ErrorIs(t, c.returned(), lost, "the first cause stays")
}
