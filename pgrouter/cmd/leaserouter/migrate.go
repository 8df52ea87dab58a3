package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/leaserouter/leaserouter/pgrouter"
)

// doMigrate brings the schema to --to (latest by default), going down only
// with --down, or with --print prints the scripts instead (see
// printMigrations).
func doMigrate(ctx context.Context, c *call) error {
	if c.opts.print {
		return c.printMigrations()
	}
	to, err := parseVersion("--to", c.opts.to, pgrouter.LatestVersion())
	if err != nil {
		return err
	}
	db, err := c.pool(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	if to != pgrouter.LatestVersion() || c.opts.down {
		at, err := pgrouter.SchemaVersion(ctx, db, c.opts.schema)
		if err != nil {
			return err
		}
		if to < at && !c.opts.down {
			return usagef("the schema is at version %d: going down to %s drops what the versions above it added, their data too; pass --down", at, versionName(to))
		}
	}
	version := to
	if to == pgrouter.LatestVersion() {
		version = 0
	} else if to == 0 {
		version = pgrouter.VersionNone
	}
	if err := pgrouter.MigrateTo(ctx, db, pgrouter.MigrateOptions{Schema: c.opts.schema, Version: version, Down: c.opts.down}); err != nil {
		return err
	}
	if c.opts.json {
		return writeJSON(c.stdout, map[string]bool{"migrated": true})
	}
	if to == pgrouter.LatestVersion() {
		_, err = fmt.Fprintln(c.stdout, "the database's pgrouter schema is up to date")
	} else {
		_, err = fmt.Fprintf(c.stdout, "the database's pgrouter schema is at version %s\n", versionName(to))
	}
	return err
}

// printMigrations prints the scripts of pgrouter.MigrationSQL for the
// schema: up, of versions --from (1) to --to (latest); with --down, the
// down scripts of --from (latest) down to the one above --to (none), in
// the order to run them. With --json, one array of the scripts.
func (c *call) printMigrations() error {
	latest := pgrouter.LatestVersion()
	from, to := 1, latest
	if c.opts.down {
		from, to = latest, 0
	}
	var err error
	if from, err = parseVersion("--from", c.opts.from, from); err != nil {
		return err
	}
	if to, err = parseVersion("--to", c.opts.to, to); err != nil {
		return err
	}
	var versions []int
	for _, v := range pgrouter.Versions() { // a number with no migration skipped
		if c.opts.down && v > to && v <= from || !c.opts.down && v >= from && v <= to {
			versions = append(versions, v)
		}
	}
	if c.opts.down {
		slices.Reverse(versions)
	}
	if len(versions) == 0 {
		return usagef("no version from %s to %s", versionName(from), versionName(to))
	}
	scripts := make([]pgrouter.MigrationScript, len(versions))
	for i, v := range versions {
		if scripts[i], err = pgrouter.MigrationSQL(c.opts.schema, v, c.opts.down); err != nil {
			return err
		}
	}
	if c.opts.json {
		return writeJSON(c.stdout, scripts)
	}
	for i, s := range scripts {
		if i > 0 {
			fmt.Fprintln(c.stdout)
		}
		if _, err := fmt.Fprint(c.stdout, s.SQL); err != nil {
			return err
		}
	}
	return nil
}

// parseVersion reads a version flag's value: a number from 0 to
// pgrouter.LatestVersion, "latest", or "none" (0); def when empty.
func parseVersion(flag, s string, def int) (int, error) {
	latest := pgrouter.LatestVersion()
	switch s {
	case "":
		return def, nil
	case "latest":
		return latest, nil
	case "none":
		return 0, nil
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < 0 || v > latest {
		return 0, usagef("%s %q: a version from 0 to %d, \"latest\" or \"none\"", flag, s, latest)
	}
	return v, nil
}

// versionName is v as the flags name it.
func versionName(v int) string {
	if v == 0 {
		return "none"
	}
	return strconv.Itoa(v)
}

// shellQuote is s quoted for a POSIX shell when it needs to be.
func shellQuote(s string) string {
	if s != "" && !strings.ContainsFunc(s, func(r rune) bool {
		return !(r == '_' || r == '-' || r == '.' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
	}) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
