package delivery_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if a delivery goroutine they start
// outlives them.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
