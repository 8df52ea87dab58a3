package benchmarks

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if a goroutine of either side outlives the tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
