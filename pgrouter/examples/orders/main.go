// Command orders runs an order service's jobs on PostgreSQL with two
// pgrouter Clients, as two instances of a service would: each places
// orders, charges them and mails a receipt, sharing one durable job set.
//
//	orders [-orders n] [-fail p]
//
// With LEASEROUTER_DATABASE_URL unset it starts a throwaway PostgreSQL
// cluster (the system's binaries) and removes it at the end. An order is
// written and its "charge" job enqueued in one transaction (EnqueueTx):
// either both are committed or neither. A charge job, in one transaction
// of its own, checks its fencing token (pgrouter.Fence), marks the order
// charged, enqueues the "receipt" job of another kind on another queue
// and completes its lease (CompleteTx): a stale attempt's transaction
// is refused and rolls back whole. A middleware fails a fraction -fail of
// the attempts before the handler runs, so jobs are retried. At the end
// the program checks that every order was charged once and got one
// receipt; the exit status is 1 if not, 2 for bad usage.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// envURL names a database to use instead of a throwaway cluster.
const envURL = "LEASEROUTER_DATABASE_URL"

// The payloads of the two kinds.
type (
	charge  struct{ Order, Cents int64 }
	receipt struct {
		Order int64
		To    string
	}
)

type config struct {
	orders int
	fail   float64
}

// summary is what the run found.
type summary struct {
	orders, charged, receipts, doubleCharged int
	attempts, failed                         int64
}

func run(args []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("orders", flag.ContinueOnError)
	fl.SetOutput(stderr)
	var cfg config
	fl.IntVar(&cfg.orders, "orders", 300, "orders to place")
	fl.Float64Var(&cfg.fail, "fail", 0.1, "fraction of attempts the middleware fails before the handler (retried)")
	if err := fl.Parse(args); errors.Is(err, flag.ErrHelp) {
		return 0
	} else if err != nil {
		return 2
	}
	if cfg.orders < 1 || cfg.fail < 0 || cfg.fail > 0.5 || fl.NArg() > 0 {
		fmt.Fprintln(stderr, "orders: -orders must be at least 1, -fail in [0, 0.5], and no arguments")
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	start := time.Now()
	s, err := serve(ctx, cfg, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "orders: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "orders: orders=%d charged=%d receipts=%d double_charged=%d attempts=%d failed_attempts=%d took=%v\n",
		s.orders, s.charged, s.receipts, s.doubleCharged, s.attempts, s.failed, time.Since(start).Round(time.Millisecond))
	if s.charged != s.orders || s.receipts != s.orders || s.doubleCharged != 0 {
		return 1
	}
	return 0
}

// serve sets up the database, runs two Clients until every order is
// charged and mailed, and reads the outcome.
func serve(ctx context.Context, cfg config, stderr io.Writer) (summary, error) {
	url := os.Getenv(envURL)
	if url == "" {
		fmt.Fprintln(stderr, "orders: starting a throwaway PostgreSQL cluster")
		c, err := pgtest.StartCluster(ctx)
		if err != nil {
			return summary{}, err
		}
		defer c.Close()
		url = c.URL("postgres")
	}
	db, err := pgxpool.New(ctx, url)
	if err != nil {
		return summary{}, err
	}
	defer db.Close()
	if err := setup(ctx, db); err != nil {
		return summary{}, err
	}
	var attempts, failed atomic.Int64
	// Two instances of the service, each with a Client of its own, as two
	// processes would have; either may take any job.
	var clients []*pgrouter.Client
	var places []*pgrouter.Kind[charge]
	for range 2 {
		c, charges, err := newService(ctx, db, cfg.fail, &attempts, &failed)
		if err != nil {
			return summary{}, err
		}
		clients, places = append(clients, c), append(places, charges)
	}
	for _, c := range clients {
		if err := c.Start(ctx); err != nil {
			return summary{}, err
		}
	}
	// Orders come in from 8 request goroutines, spread over the instances.
	var placing sync.WaitGroup
	placed := make([]error, 8)
	for g := range placed {
		placing.Go(func() {
			for i := g; i < cfg.orders && placed[g] == nil; i += len(placed) {
				placed[g] = placeOrder(ctx, db, places[i%2], int64(i+1))
			}
		})
	}
	placing.Wait()
	if err := errors.Join(placed...); err != nil {
		return summary{}, err
	}
	var errs []error
	for _, c := range clients {
		errs = append(errs, c.Drained(ctx))
	}
	for _, c := range clients {
		errs = append(errs, c.Stop(ctx))
	}
	if err := errors.Join(errs...); err != nil {
		return summary{}, err
	}
	s := summary{attempts: attempts.Load(), failed: failed.Load()}
	err = db.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM orders),
		(SELECT count(*) FROM orders WHERE charged),
		(SELECT count(DISTINCT order_id) FROM receipts),
		(SELECT count(*) FROM orders WHERE charges > 1)`).Scan(&s.orders, &s.charged, &s.receipts, &s.doubleCharged)
	return s, err
}

// setup migrates the job tables and makes the service's own.
func setup(ctx context.Context, db *pgxpool.Pool) error {
	if err := pgrouter.Migrate(ctx, db); err != nil {
		return err
	}
	_, err := db.Exec(ctx, `
		CREATE TABLE IF NOT EXISTS orders (
			id bigint PRIMARY KEY, cents bigint NOT NULL,
			charged boolean NOT NULL DEFAULT false, charges int NOT NULL DEFAULT 0);
		CREATE TABLE IF NOT EXISTS receipts (
			order_id bigint PRIMARY KEY REFERENCES orders, sent_to text NOT NULL);
		TRUNCATE receipts, orders`)
	return err
}

// newService is one instance of the service: a Client with a queue per
// concern, its two kinds and a middleware.
func newService(ctx context.Context, db *pgxpool.Pool, fail float64, attempts, failed *atomic.Int64) (*pgrouter.Client, *pgrouter.Kind[charge], error) {
	c, err := pgrouter.NewClient(ctx, db, pgrouter.ClientOptions{
		Options: pgrouter.Options{
			LeaseDuration: 10 * time.Second,
			MaxAttempts:   25, // injected failures never exhaust a job: a lost order is a real bug
			Backoff:       func(int) time.Duration { return 10 * time.Millisecond },
			PollInterval:  time.Second,
		},
		Queues: map[string]pgrouter.QueueConfig{
			"payments": {Workers: 8},
			"mail":     {Workers: 4},
		},
		Middleware: []leaserouter.Middleware{
			func(ctx context.Context, a leaserouter.Attempt, next func(context.Context) error) error {
				attempts.Add(1)
				if rand.Float64() < fail {
					failed.Add(1)
					return fmt.Errorf("%s %s attempt %d: injected failure", a.Kind, a.JobID, a.Attempt)
				}
				return next(ctx)
			},
		},
	})
	if err != nil {
		return nil, nil, err
	}
	receipts, err := pgrouter.Register(c, "receipt", func(ctx context.Context, l *pgrouter.Lease[receipt]) error {
		return sendReceipt(ctx, db, l)
	}, leaserouter.WithKindQueue("mail"))
	if err != nil {
		return nil, nil, err
	}
	charges, err := pgrouter.Register(c, "charge", func(ctx context.Context, l *pgrouter.Lease[charge]) error {
		return chargeOrder(ctx, db, l, receipts)
	}, leaserouter.WithKindQueue("payments"))
	if err != nil {
		return nil, nil, err
	}
	return c, charges, nil
}

// placeOrder writes the order and enqueues its charge in one
// transaction: a rolled-back order leaves no job, a committed one always
// has its job.
func placeOrder(ctx context.Context, db *pgxpool.Pool, charges *pgrouter.Kind[charge], id int64) error {
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		cents := 100 + id%900
		if _, err := tx.Exec(ctx, `INSERT INTO orders (id, cents) VALUES ($1, $2)`, id, cents); err != nil {
			return err
		}
		return charges.EnqueueTx(ctx, tx, fmt.Sprintf("order-%d", id), charge{Order: id, Cents: cents},
			leaserouter.WithMetadata(map[string]string{"customer": fmt.Sprintf("c%d", id%17)}))
	})
}

// chargeOrder charges an order and enqueues its receipt, fenced, in one
// transaction that also completes the lease.
func chargeOrder(ctx context.Context, db *pgxpool.Pool, l *pgrouter.Lease[charge], receipts *pgrouter.Kind[receipt]) error {
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		// Refused (and the transaction rolled back) if a newer attempt
		// of this job has written already.
		if err := pgrouter.Fence(ctx, tx, l.JobID, l.Token); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE orders SET charged = true, charges = charges + 1 WHERE id = $1`, l.Payload.Order); err != nil {
			return err
		}
		to := l.Metadata()["customer"] + "@example.com"
		if err := receipts.EnqueueTx(ctx, tx, l.JobID, receipt{Order: l.Payload.Order, To: to}); err != nil {
			return err
		}
		return l.CompleteTx(ctx, tx)
	})
}

// sendReceipt records the receipt, once, and completes the lease in the
// same transaction.
func sendReceipt(ctx context.Context, db *pgxpool.Pool, l *pgrouter.Lease[receipt]) error {
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO receipts (order_id, sent_to) VALUES ($1, $2) ON CONFLICT DO NOTHING`,
			l.Payload.Order, l.Payload.To); err != nil {
			return err
		}
		return l.CompleteTx(ctx, tx)
	})
}
