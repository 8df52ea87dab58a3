package pgrouter_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strings"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// Every Example here runs on a fresh database of its own, which
// pgtest.Database gives; a program connects to its own, as
// pgxpool.New(ctx, os.Getenv("DATABASE_URL")). Without a server the
// Examples are skipped (TestMain).

// One job's life: Migrate the schema, make a Router for a queue, Enqueue
// a job, lease it with Acquire and Complete it.
func Example() {
	ctx := context.Background()
	url, drop, err := pgtest.Database(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer drop()
	db, err := pgxpool.New(ctx, url)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if err := pgrouter.Migrate(ctx, db); err != nil { // creates or upgrades the schema; a no-op when current
		log.Fatal(err)
	}
	r, err := pgrouter.New[string](ctx, db, pgrouter.Options{Queue: "mail"})
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close(ctx)

	if err := r.Enqueue(ctx, "welcome-1", "ada@example.com"); err != nil {
		log.Fatal(err)
	}
	l, err := r.Acquire(ctx, "worker-1") // blocks until a job is ready or ctx ends
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("leased", l.JobID, "attempt", l.Attempt, "for", l.Payload)
	// ... send the mail; a write elsewhere checks l.Token (see Fence) ...
	if err := l.Complete(ctx); err != nil { // refused if the lease was lost
		log.Fatal(err)
	}
	j, _, err := r.Get(ctx, "welcome-1")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(j.ID, j.State)
	// Output:
	// leased welcome-1 attempt 1 for ada@example.com
	// welcome-1 succeeded
}

// A Client with one kind of job: Register its handler, enqueue, Start
// the workers, wait until the queues are empty, Stop.
func ExampleNewClient() {
	ctx := context.Background()
	url, drop, err := pgtest.Database(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer drop()
	db, err := pgxpool.New(ctx, url)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if err := pgrouter.Migrate(ctx, db); err != nil {
		log.Fatal(err)
	}
	c, err := pgrouter.NewClient(ctx, db, pgrouter.ClientOptions{
		Queues: map[string]pgrouter.QueueConfig{"mail": {Workers: 4}},
	})
	if err != nil {
		log.Fatal(err)
	}
	type email struct{ To, Subject string }
	var sent atomic.Int32
	emails, err := pgrouter.Register(c, "email", func(ctx context.Context, l *pgrouter.Lease[email]) error {
		sent.Add(1) // send l.Payload ...
		return nil
	}, leaserouter.WithKindQueue("mail"))
	if err != nil {
		log.Fatal(err)
	}
	for _, to := range []string{"ada@example.com", "grace@example.com"} {
		if err := emails.Enqueue(ctx, "welcome/"+to, email{To: to, Subject: "Welcome"}); err != nil {
			log.Fatal(err)
		}
	}
	if err := c.Start(ctx); err != nil {
		log.Fatal(err)
	}
	if err := c.Drained(ctx); err != nil { // every queue empty
		log.Fatal(err)
	}
	if err := c.Stop(ctx); err != nil {
		log.Fatal(err)
	}
	j, _, err := c.Queue("mail").Get(ctx, "welcome/ada@example.com")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("sent", sent.Load(), "of 2; welcome/ada@example.com is a job of kind", j.Kind, j.State)
	// Output: sent 2 of 2; welcome/ada@example.com is a job of kind email succeeded
}

// A Run handler writes each document's result downstream and completes
// its job in one transaction: Fence admits the lease's token for the
// document (or refuses it if a newer holder wrote first), the write
// follows in the same transaction, and CompleteTx completes the job there
// too (or refuses it if the lease was lost, and the write rolls back with
// the transaction). The result and the completion commit together, or
// neither does.
func ExampleLease_CompleteTx() {
	ctx := context.Background()
	url, drop, err := pgtest.Database(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer drop()
	db, err := pgxpool.New(ctx, url)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if err := pgrouter.Migrate(ctx, db); err != nil {
		log.Fatal(err)
	}
	// The downstream table: each row says which lease's token wrote it.
	if _, err := db.Exec(ctx, `CREATE TABLE IF NOT EXISTS docs
		(id text PRIMARY KEY, body text NOT NULL, token bigint NOT NULL)`); err != nil {
		log.Fatal(err)
	}
	r, err := pgrouter.New[string](ctx, db, pgrouter.Options{Queue: "docs"})
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close(ctx)
	docs := []leaserouter.JobSpec[string]{{ID: "doc-1", Payload: "hello"}, {ID: "doc-2", Payload: "world"}}
	if _, err := r.EnqueueMany(ctx, docs); err != nil {
		log.Fatal(err)
	}

	runCtx, stop := context.WithCancel(ctx)
	var left atomic.Int32
	left.Store(int32(len(docs)))
	err = r.Run(runCtx, leaserouter.WorkerOptions{Workers: 2}, func(ctx context.Context, l *pgrouter.Lease[string]) error {
		tx, err := db.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx) // does nothing once tx has committed
		if err := pgrouter.Fence(ctx, tx, "doc/"+l.JobID, l.Token); err != nil {
			return err // a newer lease of this document wrote first
		}
		if _, err := tx.Exec(ctx, `INSERT INTO docs VALUES ($1, $2, $3)
			ON CONFLICT (id) DO UPDATE SET body = excluded.body, token = excluded.token`,
			l.JobID, strings.ToUpper(l.Payload), int64(l.Token)); err != nil {
			return err
		}
		if err := l.CompleteTx(ctx, tx); err != nil {
			return err // the lease was lost: the write rolls back with tx
		}
		if err := tx.Commit(ctx); err != nil {
			return err
		}
		if left.Add(-1) == 0 {
			stop() // every document written: Run returns
		}
		return nil
	})
	stop()
	if err != nil {
		log.Fatal(err)
	}

	var token int64
	for _, d := range docs {
		var body string
		if err := db.QueryRow(ctx, "SELECT body, token FROM docs WHERE id = $1", d.ID).Scan(&body, &token); err != nil {
			log.Fatal(err)
		}
		j, _, err := r.Get(ctx, d.ID)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s: %s, job %s\n", d.ID, body, j.State)
	}

	// A worker still holding an older lease of doc-2 is refused by the
	// fence, before it can write anything.
	tx, err := db.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback(ctx)
	err = pgrouter.Fence(ctx, tx, "doc/doc-2", leaserouter.Token(token-1))
	fmt.Println("older token refused:", errors.Is(err, leaserouter.ErrStaleToken))
	// Output:
	// doc-1: HELLO, job succeeded
	// doc-2: WORLD, job succeeded
	// older token refused: true
}
