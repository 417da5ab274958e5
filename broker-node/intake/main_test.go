package intake_test

import (
	"testing"

	"github.com/funduq/funduq-go/internal/leaktest"
)

// TestMain fails the package if any goroutine outlives the tests: Run must
// stop everything it started, including pgx's cleanup of the connections it
// gave up on.
func TestMain(m *testing.M) {
	leaktest.Main(m)
}
