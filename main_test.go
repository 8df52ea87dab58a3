package leaserouter

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them: every
// goroutine the library starts must end with Close or Run.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
