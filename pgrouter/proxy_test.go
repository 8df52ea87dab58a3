package pgrouter_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// stallProxy forwards TCP connections to a PostgreSQL server; while
// stalled it forwards nothing in either direction (what it has read it
// holds, and forwards once resumed), as a stalled server or network does.
type stallProxy struct {
	ln net.Listener

	mu    sync.Mutex
	gate  chan struct{} // closed while flowing
	conns []net.Conn
}

// dialer connects a proxy to a PostgreSQL server.
type dialer func() (net.Conn, error)

// serverOf dials the server db's pool connects to, as the pool does: a
// Unix socket when its host is a directory (a throwaway cluster's),
// host:port over TCP otherwise (a server at
// LEASEROUTER_TEST_DATABASE_URL may be either).
func serverOf(db *pgxpool.Pool) dialer {
	cfg := db.Config().ConnConfig
	network, address := pgconn.NetworkAddress(cfg.Host, cfg.Port)
	return func() (net.Conn, error) { return cfg.DialFunc(context.Background(), network, address) }
}

// serverInTheClear is serverOf for the cut and hold proxies, which read
// the protocol: t is skipped when the server cannot be reached without
// TLS (a server at LEASEROUTER_TEST_DATABASE_URL may require it).
func serverInTheClear(t *testing.T, db *pgxpool.Pool) dialer {
	t.Helper()
	cfg := db.Config().ConnConfig
	if !slices.Contains(tlsAttempts(&cfg.Config), nil) {
		t.Skipf("the cut and hold proxies read the protocol, and the connection string requires TLS (%s)", pgtest.EnvURL)
	}
	cfg.TLSConfig, cfg.Fallbacks = nil, nil
	conn, err := pgx.ConnectConfig(t.Context(), cfg)
	if err != nil {
		t.Skipf("the cut and hold proxies read the protocol, and the server refuses a connection without TLS (%s): %v", pgtest.EnvURL, err)
	}
	require.NoError(t, conn.Close(t.Context()))
	return serverOf(db)
}

// tlsAttempts are the TLS settings of the attempts cfg makes to connect,
// the one in the clear first (nil) where cfg allows one.
func tlsAttempts(cfg *pgconn.Config) []*tls.Config {
	all := []*tls.Config{cfg.TLSConfig}
	for _, f := range cfg.Fallbacks {
		all = append(all, f.TLSConfig)
	}
	var attempts []*tls.Config
	if slices.Contains(all, nil) {
		attempts = append(attempts, nil)
	}
	for _, c := range all {
		if c != nil {
			attempts = append(attempts, c)
		}
	}
	return attempts
}

// poolVia returns a pool on base's database through a proxy listening on
// ln, with at most maxConns connections (0: pgxpool's default), closed
// when t ends.
func poolVia(t *testing.T, base *pgxpool.Pool, ln net.Listener, maxConns int32) *pgxpool.Pool {
	t.Helper()
	cfg := base.Config()
	cc := cfg.ConnConfig
	// Every attempt through the proxy (sslmode=prefer, pgx's default,
	// falls back to the server itself without TLS), and the one in the
	// clear first where the connection string allows one (as
	// sslmode=allow): the cut and hold proxies read the protocol. With
	// TLS next, for a server that requires it.
	attempts := tlsAttempts(&cc.Config)
	host, port := "127.0.0.1", uint16(ln.Addr().(*net.TCPAddr).Port)
	cc.Host, cc.Port, cc.TLSConfig, cc.Fallbacks = host, port, attempts[0], nil
	for _, c := range attempts[1:] {
		cc.Fallbacks = append(cc.Fallbacks, &pgconn.FallbackConfig{Host: host, Port: port, TLSConfig: c})
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	db, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	return db
}

func newStallProxy(t *testing.T, server dialer) *stallProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &stallProxy{ln: ln, gate: make(chan struct{})}
	close(p.gate)
	var wg sync.WaitGroup
	t.Cleanup(func() {
		p.resume()
		ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		wg.Wait()
	})
	pipe := func(dst, src net.Conn) {
		defer dst.Close()
		defer src.Close()
		buf := make([]byte, 64<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				p.wait()
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := server()
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			wg.Go(func() { pipe(s, c) })
			wg.Go(func() { pipe(c, s) })
		}
	})
	return p
}

// stall stops forwarding; resume forwards again, what was held first.
func (p *stallProxy) stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.gate:
		p.gate = make(chan struct{})
	default:
	}
}

func (p *stallProxy) resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.gate:
	default:
		close(p.gate)
	}
}

func (p *stallProxy) wait() {
	p.mu.Lock()
	g := p.gate
	p.mu.Unlock()
	<-g
}

// cutProxy forwards TCP connections to a PostgreSQL server and, when
// armed, closes a connection right after forwarding the client message
// that follows the one holding marker (pgx prepares a statement, then
// executes it): the server gets the execution (and commits it) but the
// client never sees the answer — an unknown COMMIT outcome.
type cutProxy struct {
	ln     net.Listener
	marker []byte
	armed  atomic.Bool
	cut    atomic.Int64
	// blackout: at the cut, close every connection the proxy carries, and
	// refuse new ones while down is set (the database unreachable from
	// the client: no connection the client's pool had open before the
	// cut reaches it either).
	blackout, down atomic.Bool

	mu    sync.Mutex
	conns map[net.Conn]struct{} // both ends of every connection carried, for the blackout
}

// carry records c as carried, false if the database is down (c is
// closed then: a connection accepted as the blackout began).
func (p *cutProxy) carry(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down.Load() {
		for _, c := range cs {
			c.Close()
		}
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

// goDown sets down and closes every connection carried.
func (p *cutProxy) goDown() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down.Store(true)
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

func newCutProxy(t *testing.T, server dialer, marker string) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &cutProxy{ln: ln, marker: []byte(marker), conns: map[net.Conn]struct{}{}}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if p.down.Load() {
				c.Close()
				continue
			}
			s, err := server()
			if err != nil {
				c.Close()
				continue
			}
			if !p.carry(c, s) {
				continue
			}
			wg.Go(func() { _, _ = io.Copy(c, s); c.Close() })
			wg.Go(func() {
				defer s.Close()
				defer c.Close()
				buf := make([]byte, 64<<10)
				prepared := false // the statement holding marker was prepared: its execution comes next
				for {
					n, err := c.Read(buf)
					if n > 0 {
						if _, werr := s.Write(buf[:n]); werr != nil {
							return
						}
						if prepared {
							p.armed.Store(false)
							p.cut.Add(1) // before any connection closes: the client sees the cut counted
							if p.blackout.Load() {
								p.goDown()
							}
							return // the server has the execution; the client loses the answer
						}
						prepared = p.armed.Load() && bytes.Contains(buf[:n], p.marker)
					}
					if err != nil {
						return
					}
				}
			})
		}
	})
	return p
}
