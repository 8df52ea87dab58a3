package pgrouter

import (
	"fmt"
	"hash/fnv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/leaserouter/leaserouter"
)

// schemaMarker stands, in every file of sql/ and migrations/ (claimsql.go
// renders claim.sql and claim_arm.sql, which have it too), before each
// name of an object pgrouter creates that SQL lets a schema qualify: its
// tables, sequences, enum type, functions, statistics, and an index being
// dropped (not one being created: CREATE INDEX puts an index in its
// table's schema), inside string literals read as names too
// ('/*schema*/leaserouter_token'::regclass, nextval) and inside function
// bodies, which then name their schema's objects rather than rely on the
// caller's search_path (SET search_path on the functions would stop the
// planner inlining the SQL ones, which every lease statement calls).
// qualify replaces it once, when the statements of a schema are compiled
// (statementsFor) or a migration is rendered (migrationSteps): by nothing
// for the default schema "" (the text sent is the file's, byte for byte,
// names resolved by the connection's search_path, as before schemas
// existed), by the quoted schema and a dot for another. A new file must
// write it before every such name (TestEveryObjectNameCarriesTheSchemaMarker
// checks); a trigger's name (in CREATE TRIGGER, in pg_trigger.tgname) is
// never qualified.
const schemaMarker = "/*schema*/"

// qualify is text with every schemaMarker replaced by schema's prefix:
// nothing for "", `"schema".` for another (checkSchema's name, quoted).
func qualify(text, schema string) string {
	prefix := ""
	if schema != "" {
		prefix = pgx.Identifier{schema}.Sanitize() + "."
	}
	return strings.ReplaceAll(text, schemaMarker, prefix)
}

// MaxSchemaBytes is the longest Options.Schema: PostgreSQL's limit on a
// name (NAMEDATALEN-1).
const MaxSchemaBytes = 63

// checkSchema returns an error wrapping leaserouter.ErrInvalidOptions
// for a schema name pgrouter cannot use: blank (empty after trimming
// spaces, when not empty), with spaces around it, over MaxSchemaBytes
// bytes, not valid UTF-8, holding a control character, a quote (' or
// ") or a dollar sign ($: the name is written into the migrations'
// dollar-quoted function bodies, where "$$" would end one), or starting
// with "pg_" (reserved by PostgreSQL). "" (the default) is valid. The
// name is quoted wherever it is sent, so any other is safe and kept as
// written, case included.
func checkSchema(field, schema string) error {
	if schema == "" {
		return nil
	}
	problem := ""
	switch {
	case strings.TrimSpace(schema) == "":
		problem = "is blank"
	case strings.TrimSpace(schema) != schema:
		problem = "has spaces around it"
	case len(schema) > MaxSchemaBytes:
		problem = fmt.Sprintf("is %d bytes, more than MaxSchemaBytes (%d)", len(schema), MaxSchemaBytes)
	case !utf8.ValidString(schema):
		problem = "is not valid UTF-8"
	case strings.ContainsFunc(schema, func(r rune) bool { return unicode.IsControl(r) || r == '\'' || r == '"' || r == '$' }):
		problem = "holds a control character, a quote or a dollar sign"
	case strings.HasPrefix(strings.ToLower(schema), "pg_"):
		problem = `starts with "pg_", reserved for PostgreSQL's own schemas`
	}
	if problem != "" {
		return fmt.Errorf("%w: %s %q %s", leaserouter.ErrInvalidOptions, field, schema, problem)
	}
	return nil
}

// schemaChannel is the LISTEN/NOTIFY channel of schema's queues:
// "leaserouter" for the default schema (as before schemas existed), else
// "leaserouter:" and the schema (or, past a channel name's 63 bytes, a
// hash of it), so that a schema's notifications never wake the Routers
// of another.
func schemaChannel(schema string) string {
	if schema == "" {
		return channel
	}
	if c := channel + ":" + schema; len(c) <= MaxSchemaBytes {
		return c
	}
	return fmt.Sprintf("%s#%016x", channel, schemaHash(schema))
}

// schemaHash is a 64-bit hash of schema (FNV-1a): Migrate's advisory
// lock keys and long channel names of a schema derive from it.
func schemaHash(schema string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(schema))
	return h.Sum64()
}

// migrateLocks are Migrate's advisory lock keys for schema: the
// constants for the default schema (so that a Migrate of a version
// before schemas, run during a rolling upgrade, shares them), else the
// constants mixed with the schema's hash, so that Migrates of two
// schemas never wait for each other.
func migrateLocks(schema string) (xact, session int64) {
	if schema == "" {
		return migrateLock, migrateSessionLock
	}
	h := schemaHash(schema)
	return int64(migrateLock ^ h), int64(migrateSessionLock ^ h)
}
