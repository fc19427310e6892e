package cli

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// The test binary's own read-only pages are released: its resident set does
// not grow, and what it runs next still runs (the pages fault back in).
func TestReleaseStartupPages(t *testing.T) {
	before, after, err := releaseStartupPages()
	if errors.Is(err, unix.EINVAL) {
		t.Skip("kernel without MADV_PAGEOUT (Linux < 5.4)")
	}
	require.NoError(t, err)
	t.Logf("resident %d KiB → %d KiB", before, after)
	assert.Positive(t, before)
	assert.LessOrEqual(t, after, before)
	assert.Positive(t, residentKiB(), "still running, pages faulted back")
}
