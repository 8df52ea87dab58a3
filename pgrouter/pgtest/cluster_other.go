//go:build !unix

package pgtest

import (
	"context"
	"fmt"
	"runtime"
)

// Cluster is a throwaway PostgreSQL server on Unix systems (Linux,
// macOS): initdb into a temporary directory, the server on a Unix socket
// in it. There are none on this system (Windows): StartCluster returns an
// error wrapping ErrNoPostgres, and tests use the server at
// LEASEROUTER_TEST_DATABASE_URL.
type Cluster struct{}

// clusters: no throwaway cluster can run on this system.
const clusters = false

// errNoServer is StartCluster's error on this system.
var errNoServer = fmt.Errorf("%w: no throwaway clusters on %s; set %s to a server's URL", ErrNoPostgres, runtime.GOOS, EnvURL)

// findServer returns errNoServer: there are no throwaway clusters here.
func findServer() error { return errNoServer }

// StartCluster returns an error wrapping ErrNoPostgres on this system:
// there are no throwaway clusters here.
func StartCluster(ctx context.Context) (*Cluster, error) { return nil, errNoServer }

// URL returns "": there are no clusters on this system.
func (c *Cluster) URL(name string) string { return "" }

// Start returns an error wrapping ErrNoPostgres: there are no clusters on
// this system.
func (c *Cluster) Start(ctx context.Context) error { return errNoServer }

// Stop does nothing: there are no clusters on this system.
func (c *Cluster) Stop(crash bool) error { return nil }

// Close does nothing: there are no clusters on this system.
func (c *Cluster) Close() error { return nil }
