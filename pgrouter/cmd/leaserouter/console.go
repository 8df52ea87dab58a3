package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/leaserouter/leaserouter/console"
	"github.com/leaserouter/leaserouter/pgrouter"
)

// shutdownTimeout bounds the wait for requests in flight at shutdown.
const shutdownTimeout = 5 * time.Second

// doConsole serves the console of every queue the database has when it
// starts (Queues; the default queue when there is none) until ctx ends,
// then shuts the server down gracefully and closes the Routers. Queues
// that appear later are shown after a restart.
func doConsole(ctx context.Context, c *call) error {
	db, err := c.pool(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	first, err := c.router(ctx, db, pgrouter.DefaultQueue)
	if err != nil {
		return err
	}
	routers := []*router{first}
	defer func() {
		for _, r := range routers {
			closeRouter(r)
		}
	}()
	qs, err := first.Queues(ctx)
	if err != nil {
		return err
	}
	var sources []console.Source
	for _, q := range qs {
		r := first
		if q.Name != first.Queue() {
			if r, err = c.router(ctx, db, q.Name); err != nil {
				return err
			}
			routers = append(routers, r)
		}
		sources = append(sources, r)
	}
	if len(sources) == 0 {
		sources = append(sources, first)
	}
	h, err := console.New(console.Options{ReadOnly: c.opts.readOnly, Logger: slog.New(slog.NewTextHandler(c.stderr, nil))}, sources...)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", c.opts.addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: c.opts.auth.wrap(h), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Fprintf(c.stdout, "console: %s (%d queues; stop with Ctrl-C)\n", consoleURL(ln.Addr()), len(sources))
	select {
	case err = <-served: // the listener failed
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	err = srv.Shutdown(sctx)
	if serr := <-served; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}

// consoleURL is the console's URL at addr, the address it listens on
// (localhost for every interface).
func consoleURL(addr net.Addr) string {
	host, port := addr.String(), ""
	if ta, ok := addr.(*net.TCPAddr); ok {
		host, port = ta.IP.String(), fmt.Sprint(ta.Port)
		if ta.IP.IsUnspecified() {
			host = "localhost"
		}
		host = net.JoinHostPort(host, port)
	}
	return "http://" + host + "/"
}
