package leaserouter_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
)

// TestPeriodicCloseFromPayloadDuringCloseDoesNotWait: a Payload in
// progress as another goroutine's Close begins, which then calls Close
// itself (on an error, say), does not wait for that first Close: the
// first Close waits for this very Payload to return, so a wait there is a
// deadlock, cut only by a ctx. Close from OnEvent returns nil at once in
// the same case; Close from Payload must too.
func TestPeriodicCloseFromPayloadDuringCloseDoesNotWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := setup(t, leaserouter.Options{})
		entered, release := make(chan struct{}), make(chan struct{})
		inner := make(chan error, 1)
		require.NoError(t, r.AddPeriodic(leaserouter.Periodic[string]{Name: "p", Schedule: leaserouter.Every(time.Second),
			Payload: func(time.Time) string {
				close(entered)
				<-release
				// Bounded so that the test ends when the bug is there.
				ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
				defer cancel()
				inner <- r.Close(ctx)
				return ""
			}}))
		time.Sleep(time.Second)
		<-entered
		outer := goClose(context.Background(), r) // waits for the Payload in progress
		synctest.Wait()
		requireBlocked(t, outer)
		close(release)
		sleep(time.Minute) // far less than the inner Close's ctx
		select {
		case err := <-inner:
			require.NoError(t, err)
		default:
			t.Error("Close from the Payload the first Close waits for is waiting for that Close: a deadlock until its ctx is done")
		}
		sleep(time.Hour) // let the bug's wait end, so that the bubble ends
		require.NoError(t, receive(t, outer))
	})
}
