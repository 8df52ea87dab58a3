package pgrouter

import (
	"context"
	"fmt"
	"time"

	"github.com/leaserouter/leaserouter"
)

// Drained waits until no job of a kind the Client registered is
// pending, scheduled or leased in any of its queues, and returns nil:
// every such job enqueued before has finished (succeeded, dead or
// canceled), in this process or another, and so have the jobs their
// handlers enqueued. Jobs of kinds the Client did not register are not
// counted (no process of this Client could run them). It checks the
// table when a queue of the Client's finds nothing to claim, when any
// process enqueues, releases or retries a job of its queues, and at least
// every PollInterval, never on a poll by the caller. It returns ctx.Err()
// if ctx is done first, leaserouter.ErrClosed if the Client is stopped
// with jobs left (they would not run here), or an error wrapping the
// driver's. For tests and batch programs: a service taking new work is
// rarely drained. A Client not started drains only if it has none of
// those jobs. A nil ctx means context.Background(); a Client not made
// by NewClient (nil, or a zero Client) returns an error wrapping
// leaserouter.ErrInvalidOptions.
func (c *Client) Drained(ctx context.Context) error {
	if err := c.check(); err != nil {
		return err
	}
	ctx = orBackground(ctx)
	kinds := c.life.Kinds()
	if len(kinds) == 0 {
		return nil
	}
	poll := c.queues[c.names[0]].r.opts.PollInterval
	for {
		woken := c.idle.wait() // before checking: a signal during the check is not missed
		var left bool
		if err := c.db.QueryRow(ctx, c.sh.st.clientUnfinished, args{"queues": c.names, "kinds": kinds}).Scan(&left); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("pgrouter: Drained: %w", err)
		}
		if !left {
			return nil
		}
		if c.life.Stopped() {
			return leaserouter.ErrClosed
		}
		t := time.NewTimer(poll)
		select {
		case <-woken:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		t.Stop()
	}
}
