package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
)

// connectTimeout bounds a connection attempt when the URL sets none
// (connect_timeout): an unreachable host fails instead of hanging.
const connectTimeout = 10 * time.Second

// closeTimeout bounds the closing of a Router: the CLI's Routers hold no
// lease, so Close has nothing to wait for but its own goroutines.
const closeTimeout = 5 * time.Second

// pool opens a pool on the call's database. It connects lazily: the first
// statement reports an unreachable database.
func (c *call) pool(ctx context.Context) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(c.opts.url)
	if err != nil {
		return nil, usageError{fmt.Errorf("--database-url: %w", err)}
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = connectTimeout
	}
	return pgxpool.NewWithConfig(ctx, cfg)
}

// router is a Router on queue, for an operator's calls: it never vacuums
// (the workers' Routers do), and finishes jobs with --retention.
type router = pgrouter.Router[json.RawMessage]

func (c *call) router(ctx context.Context, db *pgxpool.Pool, queue string) (*router, error) {
	r, err := pgrouter.New[json.RawMessage](ctx, db, pgrouter.Options{Queue: queue, Schema: c.opts.schema, NoVacuum: true, Retention: c.opts.retention})
	if errors.Is(err, pgrouter.ErrSchemaOutdated) {
		hint := "run 'leaserouter migrate'"
		if c.opts.schema != "" {
			hint = "run: leaserouter migrate --schema " + shellQuote(c.opts.schema)
		}
		err = fmt.Errorf("%w (%s)", err, hint)
	}
	return r, err
}

// closeRouter closes r, bounded by closeTimeout.
func closeRouter(r *router) {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	_ = r.Close(ctx)
}

// withRouter runs f with a Router on the call's queue, then closes it and
// the pool.
func (c *call) withRouter(ctx context.Context, f func(r *router) error) error {
	db, err := c.pool(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	queue := c.opts.queue
	if queue == "" {
		queue = pgrouter.DefaultQueue
	}
	r, err := c.router(ctx, db, queue)
	if err != nil {
		return err
	}
	defer closeRouter(r)
	return f(r)
}

func doQueues(ctx context.Context, c *call) error {
	return c.withRouter(ctx, func(r *router) error {
		qs, err := r.Queues(ctx)
		if err != nil {
			return err
		}
		out := make([]queueJSON, len(qs))
		for i, q := range qs {
			out[i] = queueJSON{Queue: q.Name, Paused: q.Paused, counts: countsOf(q.Pending, q.Scheduled, q.Leased, q.Succeeded, q.Dead, q.Canceled)}
		}
		if c.opts.json {
			return writeJSON(c.stdout, out)
		}
		return queuesTable(c.stdout, out)
	})
}

func doStats(ctx context.Context, c *call) error {
	return c.withRouter(ctx, func(r *router) error {
		st, err := r.Stats(ctx)
		if err != nil {
			return err
		}
		q := queueJSON{Queue: r.Queue(), Paused: st.Paused, Estimated: st.Estimated,
			counts: countsOf(st.Pending, st.Scheduled, st.Leased, st.Succeeded, st.DeadJobs, st.Canceled)}
		if c.opts.json {
			return writeJSON(c.stdout, q)
		}
		if err := queuesTable(c.stdout, []queueJSON{q}); err != nil {
			return err
		}
		if st.Estimated {
			_, err = fmt.Fprintln(c.stdout, "(counts estimated: the queue is large)")
		}
		return err
	})
}

func doList(ctx context.Context, c *call) error {
	return c.withRouter(ctx, func(r *router) error {
		page, err := r.List(ctx, leaserouter.ListParams{States: c.opts.states, Kinds: c.opts.kinds, IDPrefix: c.opts.prefix,
			Cursor: c.opts.cursor, Limit: c.opts.limit})
		if err != nil {
			return err
		}
		out := pageJSON{Queue: r.Queue(), Jobs: make([]jobJSON, len(page.Jobs)), NextCursor: page.NextCursor}
		for i, j := range page.Jobs {
			out.Jobs[i] = jobOf(r.Queue(), j)
		}
		if c.opts.json {
			return writeJSON(c.stdout, out)
		}
		return listTable(c.stdout, out)
	})
}

func doGet(ctx context.Context, c *call) error {
	return c.withRouter(ctx, func(r *router) error {
		j, ok, err := r.Get(ctx, c.args[0])
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("%w: %q in queue %q", leaserouter.ErrNotFound, c.args[0], r.Queue())
		}
		if c.opts.json {
			return writeJSON(c.stdout, jobOf(r.Queue(), j))
		}
		return jobTable(c.stdout, jobOf(r.Queue(), j))
	})
}

func doRetry(ctx context.Context, c *call) error {
	return c.each(ctx, "retried", (*router).Retry)
}

func doCancel(ctx context.Context, c *call) error {
	return c.each(ctx, "canceled", (*router).Cancel)
}

func doDelete(ctx context.Context, c *call) error {
	return c.each(ctx, "deleted", (*router).Delete)
}

// each applies op to every ID of the call, in order, going on after a
// refusal: each refusal is written to stderr, and the call fails if any
// was refused.
func (c *call) each(ctx context.Context, done string, op func(*router, context.Context, string) error) error {
	return c.withRouter(ctx, func(r *router) error {
		out := actionJSON{Queue: r.Queue(), Action: c.cmd.name, Results: make([]resultJSON, 0, len(c.args))}
		failed := 0
		for _, id := range c.args {
			if err := ctx.Err(); err != nil {
				return err // interrupted: the rest is not done
			}
			res := resultJSON{ID: id, OK: true}
			if err := op(r, ctx, id); err != nil {
				res = resultJSON{ID: id, Error: err.Error()}
				failed++
				fmt.Fprintf(c.stderr, "leaserouter %s: %s: %v\n", c.cmd.name, id, err)
			} else if !c.opts.json {
				fmt.Fprintf(c.stdout, "%s %s\n", done, id)
			}
			out.Results = append(out.Results, res)
		}
		if c.opts.json {
			if err := writeJSON(c.stdout, out); err != nil {
				return err
			}
		}
		if failed > 0 {
			return fmt.Errorf("%d of %d jobs refused", failed, len(c.args))
		}
		return nil
	})
}

func doPause(ctx context.Context, c *call) error {
	return c.setPaused(ctx, true)
}

func doResume(ctx context.Context, c *call) error {
	return c.setPaused(ctx, false)
}

// setPaused pauses or resumes the call's queue. A queue the database
// does not know (no jobs, no row of a pause or resume) is refused unless
// --create: pausing a misspelt name would otherwise make a paused queue
// no worker uses, and report success.
func (c *call) setPaused(ctx context.Context, paused bool) error {
	return c.withRouter(ctx, func(r *router) error {
		op, word, verb := r.Resume, "resumed", "resume"
		if paused {
			op, word, verb = r.Pause, "paused", "pause"
		}
		if !c.opts.create {
			if err := knownQueue(ctx, r, verb); err != nil {
				return err
			}
		}
		if err := op(ctx); err != nil {
			return err
		}
		if c.opts.json {
			return writeJSON(c.stdout, map[string]any{"queue": r.Queue(), "paused": paused})
		}
		_, err := fmt.Fprintf(c.stdout, "queue %q %s\n", r.Queue(), word)
		return err
	})
}

// knownQueue returns nil if the database knows r's queue (it has jobs,
// or was paused or resumed once), else an error wrapping
// leaserouter.ErrNotFound that says how to verb it all the same.
func knownQueue(ctx context.Context, r *router, verb string) error {
	qs, err := r.Queues(ctx)
	if err != nil {
		return err
	}
	for _, q := range qs {
		if q.Name == r.Queue() {
			return nil
		}
	}
	return fmt.Errorf("%w: queue %q has no jobs and was never paused or resumed (a typo? --create to %s it all the same)",
		leaserouter.ErrNotFound, r.Queue(), verb)
}
