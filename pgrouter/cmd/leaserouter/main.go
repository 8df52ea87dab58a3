// Command leaserouter operates the queues pgrouter keeps in a PostgreSQL
// database: it migrates the schema, shows the queues and their jobs,
// retries, cancels and deletes jobs, pauses and resumes queues, and serves
// the web console of every queue.
//
//	go install github.com/leaserouter/leaserouter/pgrouter/cmd/leaserouter@latest
//	leaserouter SUBCOMMAND [flags] [args]
//	leaserouter version    # the module version it was built from (from a checkout: "(devel)" or a pseudo-version, and the release its modules are at)
//
// The database is $DATABASE_URL, or the --database-url flag of every
// subcommand (a URL or a key=value connection string, as pgx takes them);
// the PostgreSQL schema of pgrouter's tables is $LEASEROUTER_SCHEMA, or
// --schema (pgrouter's Options.Schema; default the connection's
// search_path). "leaserouter migrate --print" prints the SQL of each
// schema version (--down, --from, --to) for goose, golang-migrate, atlas
// or psql, without a database.
// Output is a human-readable table, or with --json one JSON document on
// stdout. The exit status is 0 on success, 1 when an operation failed (the
// database is unreachable, a job is unknown or refuses the action) and 2 on
// bad usage (an unknown subcommand or flag, no database URL, an unknown
// state, a malformed cursor); the error goes to stderr. Run
// "leaserouter help" for the subcommands and "leaserouter help SUBCOMMAND"
// for one's flags.
//
// The console subcommand serves the console with no login on a loopback
// address; on any other it asks for one (basic auth: --user with
// $LEASEROUTER_CONSOLE_PASSWORD or --password-file; a bearer token:
// $LEASEROUTER_CONSOLE_TOKEN or --token-file) unless --insecure-no-auth.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	// SIGINT and SIGTERM cancel ctx: a running statement is abandoned, the
	// console shuts down gracefully.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
