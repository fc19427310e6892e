package fleet

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestFit(t *testing.T) {
	l := Fit([]float64{50, 100, 200, 300}, []float64{1.5, 2, 3, 4})
	assert.InDelta(t, 1, l.A, 1e-9)
	assert.InDelta(t, 0.01, l.B, 1e-9)
	assert.InDelta(t, 1, l.R2, 1e-9)
	assert.InDelta(t, 51, l.At(5000), 1e-9)

	noisy := Fit([]float64{1, 2, 3, 4}, []float64{1, 3, 2, 4})
	assert.InDelta(t, 0.8, noisy.B, 1e-9)
	assert.InDelta(t, 0.64, noisy.R2, 1e-9)

	assert.True(t, math.IsNaN(Fit([]float64{1, 2}, []float64{1, 2}).R2), "two points: no R²")
	assert.True(t, math.IsNaN(Fit(nil, nil).A))
	assert.Equal(t, 2.0, Fit([]float64{3, 3}, []float64{1, 3}).A, "no spread in x: the mean")
}
