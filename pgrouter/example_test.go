package pgrouter_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// A Run handler writes each document's result downstream and completes
// its job in one transaction: Fence admits the lease's token for the
// document (or refuses it if a newer holder wrote first), the write
// follows in the same transaction, and CompleteTx completes the job there
// too (or refuses it if the lease was lost, and the write rolls back with
// the transaction). The result and the completion commit together, or
// neither does.
//
// It needs a PostgreSQL server at $DATABASE_URL, so go test compiles it
// without running it as an example; TestExampleLeaseCompleteTx runs it
// on a throwaway database and checks what it prints.
func ExampleLease_CompleteTx() {
	ctx := context.Background()
	db, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
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
	// Printed, on a database where docs was empty:
	// doc-1: HELLO, job succeeded
	// doc-2: WORLD, job succeeded
	// older token refused: true
}

// TestExampleLeaseCompleteTx runs ExampleLease_CompleteTx, which go test
// only compiles (it needs a server), on a fresh database, and checks what
// it prints: the example users copy keeps working.
func TestExampleLeaseCompleteTx(t *testing.T) {
	cfg := pgtest.New(t).Config().ConnConfig
	dsn := fmt.Sprintf("host=%s port=%d user=%s dbname=%s", dsnValue(cfg.Host), cfg.Port, dsnValue(cfg.User), dsnValue(cfg.Database))
	if cfg.Password != "" {
		dsn += " password=" + dsnValue(cfg.Password)
	}
	if cfg.TLSConfig != nil {
		dsn += " sslmode=require"
	}
	t.Setenv("DATABASE_URL", dsn)

	// Captured as go test captures an example's output.
	rd, wr, err := os.Pipe()
	require.NoError(t, err)
	out := make(chan string)
	go func() {
		b, _ := io.ReadAll(rd)
		_ = rd.Close()
		out <- string(b)
	}()
	stdout := os.Stdout
	os.Stdout = wr
	func() {
		defer func() { os.Stdout = stdout }()
		ExampleLease_CompleteTx()
	}()
	require.NoError(t, wr.Close())
	require.Equal(t, "doc-1: HELLO, job succeeded\ndoc-2: WORLD, job succeeded\nolder token refused: true\n", <-out)
}

// dsnValue quotes s as a value of a keyword/value connection string.
func dsnValue(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}
