package benchmarks

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// TestMain fails the run if a goroutine of either side outlives the
// tests, after stopping the PostgreSQL cluster the database-backed
// comparison started.
func TestMain(m *testing.M) {
	code := pgtest.Main(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
