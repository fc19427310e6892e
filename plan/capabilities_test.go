package plan

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseBandwidth(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want int64
		err  string
	}{
		{"10M", 10_000_000, ""},
		{" 1Gi ", 1 << 30, ""},
		{"1.5k", 1500, ""},
		{"1e6", 1_000_000, ""},
		{"2E+3", 2000, ""},
		{"999", 0, "between 1k and 1P"},
		{"2P", 0, "between 1k and 1P"},
		{"-5M", 0, "want a quantity"},
		{"10 M", 0, "want a quantity"},
		{"0x10", 0, "want a quantity"},
		{"1e-999999999", 0, "want a quantity"}, // ParseQuantity alone: minutes
		{"1e999999999", 0, "want a quantity"},
		{strings.Repeat("9", 40), 0, "want a quantity"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			t.Parallel()
			type result struct {
				rate int64
				err  error
			}
			done := make(chan result, 1)
			go func() { r, err := parseBandwidth(tc.in); done <- result{r, err} }()
			var got result
			select {
			case got = <-done:
			case <-time.After(30 * time.Second): // the unchecked parse hangs for minutes
				t.Fatalf("parseBandwidth(%q) still running after 30 s", tc.in)
			}
			if tc.err != "" {
				require.Error(t, got.err)
				assert.Contains(t, got.err.Error(), tc.err)
				return
			}
			require.NoError(t, got.err)
			assert.Equal(t, tc.want, got.rate)
		})
	}
}
