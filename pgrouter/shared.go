package pgrouter

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// shared is the machinery of a process that holds a connection of its
// own, outside the caller's pool, shared by every Router built on it:
// one listening connection dispatching each queue's notifications to
// that queue's wakers, and one heartbeat connection that every Run's
// heartbeat rounds and every KeepAlive round take turns on. A lone New
// builds a private one; a Client builds one for all its queues, so its
// connections stay at the pool's plus these two, however many kinds and
// queues it has.
type shared struct {
	db        *pgxpool.Pool
	st        *statements // the statements of the schema its Routers share
	channel   string      // the schema's LISTEN/NOTIFY channel
	beats     beatConn
	listening atomic.Bool // the listener's connection LISTENs (and has broadcast once since)
	stop      context.CancelFunc
	lctx      context.Context // the listener's: done at stop

	mu     sync.Mutex
	wakers map[string][]*waker // by queue: whom a notification wakes
}

func newShared(db *pgxpool.Pool, schema string) *shared {
	s := &shared{db: db, st: statementsFor(schema), channel: schemaChannel(schema), wakers: map[string][]*waker{}, beats: beatConn{turn: make(chan struct{}, 1)}}
	s.lctx, s.stop = context.WithCancel(context.Background())
	return s
}

// start starts the listener goroutine in g (its owner waits for it after
// close).
func (s *shared) start(g *sync.WaitGroup) { g.Go(func() { s.listen(s.lctx) }) }

// close stops the listener (its goroutine ends soon after: wait on the
// group given to start) and closes the heartbeat connection, at once if
// no round uses it, else as that round ends. It never blocks. Rounds
// after it use the pool.
func (s *shared) close() {
	s.stop()
	s.beats.close()
}

// add makes w receive queue's wake-ups.
func (s *shared) add(queue string, w *waker) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.wakers[queue] = append(s.wakers[queue], w)
}

// wake broadcasts to queue's wakers; every queue's for "" (a new
// connection, which may have missed notifications).
func (s *shared) wake(queue string, all bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if all {
		for _, ws := range s.wakers {
			for _, w := range ws {
				w.broadcast()
			}
		}
		return
	}
	for _, w := range s.wakers[queue] {
		w.broadcast()
	}
}

// listen holds a connection of its own (not one of db's, so the pool keeps
// its size) that LISTENs on channel, and wakes each notification's queue
// (its payload), until ctx is done. A lost connection is made again with
// backoff (50ms doubling to 1s); each new one wakes every queue once, for
// what it may have missed.
func (s *shared) listen(ctx context.Context) {
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		conn, err := pgx.ConnectConfig(ctx, s.db.Config().ConnConfig.Copy())
		if err == nil {
			if _, err = conn.Exec(ctx, "LISTEN "+listenName(s.channel)); err == nil {
				s.wake("", true)
				s.listening.Store(true)
				backoff = 50 * time.Millisecond
				for {
					n, err := conn.WaitForNotification(ctx)
					if err != nil {
						break
					}
					s.wake(n.Payload, false)
				}
			}
			s.listening.Store(false)
			_ = conn.Close(context.Background())
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// beatConn is the heartbeat connection, outside the caller's pool (see
// ownConn), that heartbeat rounds take turns on: a round holds the turn
// from before its first statement to after its last, so rounds of
// several Runs and of KeepAlive serialize on it (a stalled round delays
// the others, each bounded by its own ctx, as a round on a connection of
// its own was).
type beatConn struct {
	turn chan struct{} // cap 1: full while a round holds the connection

	mu     sync.Mutex
	closed bool // close was called: rounds use the pool; release and close decide under mu who closes conn

	conn ownConn // guarded by turn
}

// acquire waits for the connection's turn, and reports false, without
// it, if ctx ends first. A round that has it calls release.
func (b *beatConn) acquire(ctx context.Context) bool {
	select {
	case b.turn <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

// release ends the caller's turn; it closes the connection if close was
// called meanwhile.
func (b *beatConn) release() {
	b.mu.Lock() // with close's check of the turn: one of the two closes it
	defer b.mu.Unlock()
	if b.closed {
		b.conn.close()
	}
	<-b.turn
}

func (b *beatConn) isClosed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closed
}

// get returns the connection for the caller's turn (ownConn.get), or
// pool once closed: no connection is made that nothing would close.
func (b *beatConn) get(ctx context.Context, pool *pgxpool.Pool) querier {
	if b.isClosed() {
		return pool
	}
	return b.conn.get(ctx, pool)
}

// failed is ownConn.failed for the caller's turn.
func (b *beatConn) failed(ctx context.Context, pool *pgxpool.Pool, q querier) querier {
	b.conn.drop(q)
	return b.get(ctx, pool)
}

// drop is ownConn.drop for the caller's turn.
func (b *beatConn) drop(q querier) { b.conn.drop(q) }

// close closes the connection now if no round holds it, else leaves it
// to that round's release. It never waits.
func (b *beatConn) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	select {
	case b.turn <- struct{}{}:
		b.conn.close()
		<-b.turn
	default: // the round holding it closes it in release
	}
}
