package pgtest_test

import (
	"context"
	"fmt"
	"log"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leaserouter/leaserouter/pgrouter"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// A fresh migrated database without a testing.TB, as an Example or a
// program's own harness needs one; a test calls pgtest.New(t) instead.
// The package's TestMain calls pgtest.SkipExamplesWithoutServer and
// pgtest.Main.
func ExampleDatabase() {
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
	defer db.Close() // before drop: deferred calls run last first

	r, err := pgrouter.New[string](ctx, db, pgrouter.Options{Queue: "mail"})
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close(ctx)
	if err := r.Enqueue(ctx, "welcome-1", "ada@example.com"); err != nil {
		log.Fatal(err)
	}
	var n int
	if err := db.QueryRow(ctx, "SELECT count(*) FROM leaserouter_jobs").Scan(&n); err != nil {
		log.Fatal(err)
	}
	fmt.Println("jobs in the fresh database:", n)
	// Output: jobs in the fresh database: 1
}
