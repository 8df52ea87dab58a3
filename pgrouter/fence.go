package pgrouter

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/internal/contract"
)

// MaxFenceKeyBytes is the longest key Fence accepts, in bytes: twice
// leaserouter.MaxIDBytes, so a key made of a job ID and a prefix of the
// caller's ("doc/"+l.JobID) always fits, and well inside what a btree
// entry of the fence table's key holds (2704 bytes with 8 kB pages).
const MaxFenceKeyBytes = 2 * leaserouter.MaxIDBytes

// Fence admits token t for key in the caller's transaction tx, or refuses
// it: the database form of leaserouter.Fence. It returns nil, and
// records t as the key's highest token, iff t is at least the highest
// token admitted for key so far; otherwise a *leaserouter.StaleTokenError
// (errors.Is ErrStaleToken) naming the highest, and tx stays usable. The
// key's row stays locked until tx ends, so a concurrent Fence on the same
// key waits, then is refused if its token is lower: write the downstream
// result in tx after Fence, and no stale holder's write can land after a
// newer one's. Tokens: Kleppmann, "How to do distributed locking", 2016.
// A nil tx, an empty key, or a key that breaks the core's rule for IDs
// with a limit of MaxFenceKeyBytes (valid UTF-8, no NUL; the key is a
// text column PostgreSQL indexes) is an error wrapping ErrInvalidOptions,
// returned before any statement, so tx stays usable.
func Fence(ctx context.Context, tx pgx.Tx, key string, t leaserouter.Token) error {
	return fence(ctx, tx, defaultStatements, "Fence", key, t)
}

// FenceIn is Fence on the fence table of schema (Options.Schema): the
// tokens of Routers with that Schema are admitted or refused there. A
// schema name that Options.Schema refuses is an error wrapping
// ErrInvalidOptions, returned before any statement; "" is Fence.
func FenceIn(ctx context.Context, tx pgx.Tx, schema, key string, t leaserouter.Token) error {
	if err := checkSchema("FenceIn: schema", schema); err != nil {
		return err
	}
	return fence(ctx, tx, statementsFor(schema), "FenceIn", key, t)
}

// fence is Fence with st's statements, reporting errors as call's.
func fence(ctx context.Context, tx pgx.Tx, st *statements, call, key string, t leaserouter.Token) error {
	ctx = orBackground(ctx)
	if tx == nil || key == "" {
		return fmt.Errorf("%w: %s needs a transaction and a key", leaserouter.ErrInvalidOptions, call)
	}
	if p := contract.NameProblem(key, MaxFenceKeyBytes, "MaxFenceKeyBytes"); p != "" {
		return fmt.Errorf("%w: %s key %s", leaserouter.ErrInvalidOptions, call, p)
	}
	if t > 1<<63-1 {
		return fmt.Errorf("%w: token %d is above the database's bigint", leaserouter.ErrInvalidOptions, t)
	}
	var admitted bool
	err := tx.QueryRow(ctx, st.fenceAdmit, args{"key": key, "token": int64(t)}).Scan(&admitted)
	if err != nil {
		return fmt.Errorf("pgrouter: %s: %w", call, err)
	}
	if admitted {
		return nil
	}
	// Refused: the conflicting row is locked by this transaction now, so a
	// new statement reads its latest token.
	var highest int64
	if err := tx.QueryRow(ctx, st.fenceHighest, args{"key": key}).Scan(&highest); err != nil {
		return fmt.Errorf("pgrouter: %s: %w", call, err)
	}
	return &leaserouter.StaleTokenError{Key: key, Token: t, Highest: leaserouter.Token(highest)}
}
