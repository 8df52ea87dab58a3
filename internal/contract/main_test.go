package contract

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them (a
// Lifecycle's Run goroutines end before its Stop returns).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
