// Command quickstart is the README's second program: the first one's
// Client on PostgreSQL. It connects to the database at $DATABASE_URL,
// migrates it, enqueues one job and runs it, and prints "hello, world".
//
// The README shows this file from func main on; a test checks that it is
// the same text.
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leaserouter/leaserouter/pgrouter"
)

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}

func main() {
	ctx := context.Background()
	db, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	check(err)
	defer db.Close()
	check(pgrouter.Migrate(ctx, db)) // creates or upgrades the schema; a no-op when current
	c, err := pgrouter.NewClient(ctx, db, pgrouter.ClientOptions{})
	check(err)
	greet, err := pgrouter.Register(c, "greet", func(ctx context.Context, l *pgrouter.Lease[string]) error {
		fmt.Println("hello,", l.Payload)
		return nil
	})
	check(err)
	check(greet.Enqueue(ctx, fmt.Sprint("greet-", time.Now().UnixNano()), "world")) // an ID per run: an ID is unique in its queue
	check(c.Start(ctx))
	check(c.Drained(ctx))
	check(c.Stop(ctx))
}
