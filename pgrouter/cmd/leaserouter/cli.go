package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/pgrouter"
)

// Exit statuses.
const (
	exitOK    = 0
	exitError = 1 // an operation failed
	exitUsage = 2 // bad usage: the command line or its values
)

// envURL is the environment variable naming the database.
const envURL = "DATABASE_URL"

// envSchema is the environment variable naming the schema (--schema).
const envSchema = "LEASEROUTER_SCHEMA"

// usageError is an error in the command line: exit status 2.
type usageError struct{ err error }

// Error is the wrapped error's message.
func (e usageError) Error() string { return e.err.Error() }

// Unwrap returns the wrapped error.
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// The groups of flags a subcommand takes besides --database-url and --json.
const (
	flagQueue   = 1 << iota // --queue
	flagRouter              // --retention: the subcommand opens a Router
	flagList                // --state, --kind, --prefix, --limit, --cursor
	flagConsole             // --addr, --read-only, the login (auth.go)
	flagCreate              // --create: the subcommand may make a queue
	flagMigrate             // --to, --down, --print, --from
)

// command is a subcommand.
type command struct {
	name    string
	args    string // the positional arguments' synopsis
	summary string
	flags   int
	nargs   int // positional arguments: 0 none, 1 exactly one, -1 at least one
	do      func(ctx context.Context, c *call) error
}

// commands are the subcommands, in the order help lists them.
var commands = []command{
	{name: "migrate", summary: "bring the database's pgrouter schema to this version (idempotent), to another with --to, or print its SQL", flags: flagMigrate, do: doMigrate},
	{name: "queues", summary: "list every queue with its jobs counted by state and whether it is paused", flags: flagRouter, do: doQueues},
	{name: "stats", summary: "count a queue's jobs by state", flags: flagQueue | flagRouter, do: doStats},
	{name: "list", summary: "list a queue's jobs, newest first, a page at a time", flags: flagQueue | flagRouter | flagList, do: doList},
	{name: "get", args: "ID", summary: "show one job: state, attempts, lease, last error, payload", flags: flagQueue | flagRouter, nargs: 1, do: doGet},
	{name: "retry", args: "ID...", summary: "run finished jobs (dead, canceled, succeeded) again with a fresh attempt budget", flags: flagQueue | flagRouter, nargs: -1, do: doRetry},
	{name: "cancel", args: "ID...", summary: "cancel jobs not finished (a leased job's lease is lost at once)", flags: flagQueue | flagRouter, nargs: -1, do: doCancel},
	{name: "delete", args: "ID...", summary: "delete jobs not leased (their IDs may be enqueued again)", flags: flagQueue | flagRouter, nargs: -1, do: doDelete},
	{name: "pause", summary: "stop granting leases of a queue, in every process, until resume", flags: flagQueue | flagRouter | flagCreate, do: doPause},
	{name: "resume", summary: "grant leases of a paused queue again", flags: flagQueue | flagRouter | flagCreate, do: doResume},
	{name: "console", summary: "serve the web console of every queue of the database until SIGINT or SIGTERM", flags: flagRouter | flagConsole, do: doConsole},
}

// opts are the values of a subcommand's flags.
type opts struct {
	url       string
	schema    string
	json      bool
	queue     string
	retention time.Duration
	states    []leaserouter.State
	prefix    string
	kinds     []string
	limit     int
	cursor    string
	addr      string
	readOnly  bool
	create    bool

	// migrate's (migrate.go).
	to, from    string
	down, print bool

	// The console's login (auth.go).
	user, passwordFile, tokenFile string
	insecureNoAuth                bool
	auth                          consoleAuth
}

// call is one run of a subcommand.
type call struct {
	cmd            *command
	opts           opts
	args           []string
	stdout, stderr io.Writer
}

// run runs the command line args (without the program's name) with the
// environment env, writing results to stdout and errors to stderr, and
// returns the exit status. ctx's end abandons what is running (the console
// shuts down gracefully and returns 0).
func run(ctx context.Context, args []string, env func(string) string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, mainUsage())
		return exitUsage
	}
	switch name := args[0]; name {
	case "help", "-h", "-help", "--help":
		if len(args) > 1 && name == "help" {
			cmd := lookup(args[1])
			if cmd == nil {
				fmt.Fprintf(stderr, "leaserouter: unknown subcommand %q (run 'leaserouter help')\n", args[1])
				return exitUsage
			}
			fmt.Fprint(stdout, cmd.usage())
			return exitOK
		}
		fmt.Fprint(stdout, mainUsage())
		return exitOK
	case "version", "-version", "--version":
		fmt.Fprint(stdout, version(debug.ReadBuildInfo()))
		return exitOK
	}
	cmd := lookup(args[0])
	if cmd == nil {
		fmt.Fprintf(stderr, "leaserouter: unknown subcommand %q (run 'leaserouter help')\n", args[0])
		return exitUsage
	}
	c := &call{cmd: cmd, stdout: stdout, stderr: stderr}
	err := c.parse(args[1:], env)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, cmd.usage())
		return exitOK
	}
	if err == nil {
		err = cmd.do(ctx, c)
	}
	if err == nil {
		return exitOK
	}
	fmt.Fprintf(stderr, "leaserouter %s: %v\n", cmd.name, err)
	var ue usageError
	if errors.As(err, &ue) || errors.Is(err, leaserouter.ErrInvalidOptions) {
		if errors.As(err, &ue) {
			fmt.Fprintf(stderr, "run 'leaserouter help %s' for usage\n", cmd.name)
		}
		return exitUsage
	}
	return exitError
}

func lookup(name string) *command {
	for i := range commands {
		if commands[i].name == name {
			return &commands[i]
		}
	}
	return nil
}

// flagSet returns cmd's flags, set in the returned opts when parsed.
func (cmd *command) flagSet() (*flag.FlagSet, *opts) {
	o := &opts{}
	fs := flag.NewFlagSet(cmd.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // run prints the usage and the error itself
	// Not env(envURL) as the default: the usage would print its password.
	fs.StringVar(&o.url, "database-url", "", "the database: a URL or a key=value connection string (default $"+envURL+")")
	fs.StringVar(&o.schema, "schema", "", "the PostgreSQL schema of pgrouter's tables (pgrouter's Options.Schema, MigrateOptions.Schema);\n"+
		"empty for the connection's search_path (default $"+envSchema+")")
	if cmd.name != "console" {
		fs.BoolVar(&o.json, "json", false, "print one JSON document instead of a table")
	}
	if cmd.flags&flagMigrate != 0 {
		fs.StringVar(&o.to, "to", "", "the version to migrate to: a number, \"latest\" or \"none\" (nothing of pgrouter's left);\n"+
			"below the schema's version it goes down, dropping what those versions added (their data too),\n"+
			"and needs --down (default latest; with --print --down, none)")
		fs.BoolVar(&o.down, "down", false, "allow going down (with --print: print the down scripts, latest first)")
		fs.BoolVar(&o.print, "print", false, "print the SQL of each version instead of running it, for goose, golang-migrate, atlas or psql:\n"+
			"each version headed by a comment naming it, NO TRANSACTION ones said so, ending with its record")
		fs.StringVar(&o.from, "from", "", "with --print, the first version printed (default 1; with --down, latest)")
	}
	if cmd.flags&flagQueue != 0 {
		fs.StringVar(&o.queue, "queue", pgrouter.DefaultQueue, "the queue")
	}
	if cmd.flags&flagRouter != 0 {
		fs.DurationVar(&o.retention, "retention", 0, "how long jobs this command finishes stay (canceled ones, or dead when it settles an expired last\n"+
			"attempt): pgrouter's Options.Retention, as your workers set it; 0 means pgrouter's default (10m)")
	}
	if cmd.flags&flagList != 0 {
		fs.Func("state", "only jobs in this state: pending, scheduled, leased, succeeded, dead, canceled (failed, the\nformer name of dead, is read as dead); repeated or comma-separated (default every state)", func(s string) error {
			for name := range strings.SplitSeq(s, ",") {
				st, err := parseState(strings.TrimSpace(name))
				if err != nil {
					return err
				}
				if !slices.Contains(o.states, st) {
					o.states = append(o.states, st)
				}
			}
			return nil
		})
		fs.Func("kind", "only jobs of this kind (\"\" for a Router's jobs that set no Kind, as a flag of its own);\nrepeated or comma-separated (default every kind)", func(s string) error {
			list := strings.Contains(s, ",")
			for name := range strings.SplitSeq(s, ",") {
				k := strings.TrimSpace(name)
				if list && k == "" { // "email," is a typo, not also the jobs of no kind: those are --kind "" alone
					return errors.New(`an empty kind in a list (--kind "" as a flag of its own selects the jobs of no kind)`)
				}
				if !slices.Contains(o.kinds, k) {
					o.kinds = append(o.kinds, k)
				}
			}
			return nil
		})
		fs.StringVar(&o.prefix, "prefix", "", "only jobs whose ID starts with this")
		fs.IntVar(&o.limit, "limit", leaserouter.DefaultListLimit, fmt.Sprintf("jobs per page, 1 to %d", leaserouter.MaxListLimit))
		fs.StringVar(&o.cursor, "cursor", "", "the page after the one that printed this cursor (same --state, --kind and --prefix)")
	}
	if cmd.flags&flagCreate != 0 {
		fs.BoolVar(&o.create, "create", false, "act on a queue the database does not know yet (no jobs, never paused or resumed);\n"+
			"without it such a queue, a typo most likely, is refused")
	}
	if cmd.flags&flagConsole != 0 {
		fs.StringVar(&o.addr, "addr", "127.0.0.1:8080", "the address to listen on (host:port; port 0 picks a free one); an address beyond\n"+
			"loopback is refused without a login (--user or a token) unless --insecure-no-auth;\n"+
			"the console serves plain HTTP: beyond this machine, put a TLS proxy in front")
		fs.BoolVar(&o.readOnly, "read-only", false, "refuse every action (retry, cancel, delete, run now, pause, resume) and hide their buttons")
		fs.StringVar(&o.user, "user", "", "ask for this user and a password (basic auth); the password is $"+envConsolePassword+"\n"+
			"or the first line of --password-file, never a flag (default $"+envConsoleUser+")")
		fs.StringVar(&o.passwordFile, "password-file", "", "a file whose first line is the password of --user (when $"+envConsolePassword+" is unset)")
		fs.StringVar(&o.tokenFile, "token-file", "", "a file whose first line is a token the console accepts as \"Authorization: Bearer TOKEN\"\n"+
			"(when $"+envConsoleToken+" is unset); with --user too, either login is accepted")
		fs.BoolVar(&o.insecureNoAuth, "insecure-no-auth", false, "serve an address beyond loopback without a login (something in front of the console authenticates)")
	}
	return fs, o
}

// parse reads the subcommand's flags and arguments into c. Flags may
// follow the positional arguments (retry a b --queue q), up to a "--".
func (c *call) parse(args []string, env func(string) string) error {
	fs, o := c.cmd.flagSet()
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return err
			}
			return usageError{err}
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if i := len(args) - len(rest) - 1; i >= 0 && args[i] == "--" {
			c.args = append(c.args, rest...)
			break
		}
		c.args = append(c.args, rest[0])
		args = rest[1:]
	}
	if o.url == "" {
		o.url = env(envURL)
	}
	if o.schema == "" {
		o.schema = env(envSchema)
	}
	if c.cmd.flags&flagConsole != 0 {
		auth, err := readConsoleAuth(o, env)
		if err != nil {
			return err
		}
		o.auth = auth
	}
	c.opts = *o
	switch n := len(c.args); {
	case c.cmd.nargs == 0 && n > 0:
		return usagef("takes no arguments, got %q", c.args)
	case c.cmd.nargs == 1 && n != 1:
		return usagef("takes one %s, got %d arguments", c.cmd.args, n)
	case c.cmd.nargs < 0 && n == 0:
		return usagef("takes at least one ID")
	case o.url == "" && !o.print:
		return usagef("no database: set $%s or pass --database-url", envURL)
	case o.from != "" && !o.print:
		return usagef("--from is for --print")
	case c.cmd.flags&flagList != 0 && (o.limit < 1 || o.limit > leaserouter.MaxListLimit):
		return usagef("--limit %d, must be between 1 and %d", o.limit, leaserouter.MaxListLimit)
	}
	return nil
}

// parseState is the state named s: leaserouter.ParseState, which reads
// "failed" as dead.
func parseState(s string) (leaserouter.State, error) {
	st, err := leaserouter.ParseState(s)
	if err != nil {
		return 0, fmt.Errorf("unknown state %q (one of pending, scheduled, leased, succeeded, dead, canceled)", s)
	}
	return st, nil
}

func mainUsage() string {
	var b strings.Builder
	b.WriteString(`leaserouter operates the job queues pgrouter keeps in PostgreSQL.

usage: leaserouter SUBCOMMAND [flags] [args]

subcommands:
`)
	for _, cmd := range commands {
		fmt.Fprintf(&b, "  %-9s %s\n", cmd.name, cmd.summary)
	}
	fmt.Fprintf(&b, `
The database is $%s or --database-url. Tables by default, --json for
one JSON document. Exit status: 0 success, 1 an operation failed, 2 bad usage.
Run 'leaserouter help SUBCOMMAND' for a subcommand's flags,
'leaserouter version' for the version.
`, envURL)
	return b.String()
}

func (cmd *command) usage() string {
	fs, _ := cmd.flagSet()
	var b strings.Builder
	fmt.Fprintf(&b, "usage: leaserouter %s [flags]", cmd.name)
	if cmd.args != "" {
		fmt.Fprintf(&b, " %s", cmd.args)
	}
	fmt.Fprintf(&b, "\n\n%s.\n\nflags:\n", strings.ToUpper(cmd.summary[:1])+cmd.summary[1:])
	fs.SetOutput(&b)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
	return b.String()
}
