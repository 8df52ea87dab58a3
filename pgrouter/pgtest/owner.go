package pgtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"strconv"

	"github.com/jackc/pgx/v5"
)

// On a server named by LEASEROUTER_TEST_DATABASE_URL, the databases of a
// test process are named for its owner key (ownerKey, random per
// process): leaserouter_template_<key>_<pid> and
// leaserouter_test_<key>_<pid>_<n>. Before it creates any, the process
// takes the advisory lock (lockClass, key) on a connection it keeps
// until Main ends: the lock is held exactly while the process lives, on
// any host, however the process ends (a panic, go test -timeout, a
// kill), since the server releases a session's locks when its
// connection closes. A process starting on the server drops the
// databases whose owner's lock nobody holds.

// lockClass is the first key of the owners' advisory locks: pgtest's,
// among the other users of the server's advisory locks.
const lockClass = 0x6c727467 // "lrtg"

// ownerKey is this process's key: its databases' names carry it, its
// advisory lock is (lockClass, ownerKey).
var ownerKey = rand.Uint32()

// owned matches the names of the databases of an owner: the key is 8 hex
// digits, unlike the pid (at most 7 digits) that leads the names of
// throwaway clusters' databases, which no lock guards. A name may go on
// (a test's database named after its own, as "_empty").
var owned = regexp.MustCompile(`^leaserouter_(?:template|test)_([0-9a-f]{8})_[0-9]`)

// templateName is the name of this process's template on a server named
// by LEASEROUTER_TEST_DATABASE_URL.
func templateName() string {
	return fmt.Sprintf("leaserouter_template_%08x_%d", ownerKey, os.Getpid())
}

// dbName is the name of a new test database on the server at adminURL:
// the owner's when this process holds its lock there.
func dbName(adminURL string, seq int64) string {
	servers.mu.Lock()
	s := servers.byURL[adminURL]
	servers.mu.Unlock()
	if s != nil && s.hold != nil {
		return fmt.Sprintf("leaserouter_test_%08x_%d_%d", ownerKey, os.Getpid(), seq)
	}
	return fmt.Sprintf("leaserouter_test_%d_%d_%08x", os.Getpid(), seq, rand.Uint32()) // unique across processes and hosts
}

// hold connects to the server at url and takes this process's lock
// there, for as long as the connection lives.
func hold(ctx context.Context, url string) (*pgx.Conn, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, err
	}
	// The connection idles for the process's life: a server's
	// idle_session_timeout would end it, and the lock with it.
	_, err = conn.Exec(ctx, "SET idle_session_timeout = 0")
	var ok bool
	if err == nil {
		err = conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1, $2)", int32(lockClass), int32(ownerKey)).Scan(&ok)
	}
	if err != nil || !ok {
		_ = conn.Close(ctx)
		if err == nil { // another live process drew the same key (one chance in 2^32)
			err = fmt.Errorf("the lock of key %08x is taken", ownerKey)
		}
		return nil, fmt.Errorf("pgtest: take the test process's lock: %w", err)
	}
	return conn, nil
}

// sweepDead drops, with conn, the databases of owners whose lock nobody
// holds: processes that ended without dropping them. A database that
// cannot be dropped (another role's) is left.
func sweepDead(ctx context.Context, conn *pgx.Conn) error {
	// The databases first, then the locks: an owner takes its lock
	// before it creates a database, so one listed here whose lock is
	// free below is an ended process's. (Locks first, a process starting
	// in between would have its fresh template dropped.)
	rows, err := conn.Query(ctx, `SELECT datname FROM pg_database WHERE datname ~ $1`, owned.String())
	if err != nil {
		return err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	if len(names) == 0 {
		return nil
	}
	// pg_locks, not pg_try_advisory_lock: advisory locks are per
	// database, and processes may name different ones in their URLs.
	rows, err = conn.Query(ctx, `SELECT objid FROM pg_locks
		WHERE locktype = 'advisory' AND classid = $1 AND objsubid = 2 AND granted`, uint32(lockClass))
	if err != nil {
		return err
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[uint32])
	if err != nil {
		return err
	}
	live := map[uint32]bool{}
	for _, k := range keys {
		live[k] = true
	}
	for _, name := range names {
		key, err := strconv.ParseUint(owned.FindStringSubmatch(name)[1], 16, 32)
		if err != nil || live[uint32(key)] {
			continue
		}
		// FORCE: the ended process's connections may not be gone yet.
		_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	}
	return nil
}
