package fleet

import "math"

// Line is a least-squares fit y = A + B·x.
type Line struct {
	A, B float64
	// R2 is the coefficient of determination (1: every point on the line;
	// NaN with fewer than 3 points or no spread in y).
	R2 float64
}

// At is the line's value at x.
func (l Line) At(x float64) float64 { return l.A + l.B*x }

// Fit fits a line to the points (xs[i], ys[i]).
func Fit(xs, ys []float64) Line {
	n := float64(len(xs))
	if len(xs) == 0 || len(xs) != len(ys) {
		return Line{A: math.NaN(), B: math.NaN(), R2: math.NaN()}
	}
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx += xs[i]
		sy += ys[i]
		sxx += xs[i] * xs[i]
		sxy += xs[i] * ys[i]
	}
	d := n*sxx - sx*sx
	if d == 0 {
		return Line{A: sy / n, R2: math.NaN()}
	}
	b := (n*sxy - sx*sy) / d
	a := (sy - b*sx) / n
	var ssRes, ssTot float64
	mean := sy / n
	for i := range xs {
		r := ys[i] - (a + b*xs[i])
		ssRes += r * r
		ssTot += (ys[i] - mean) * (ys[i] - mean)
	}
	r2 := math.NaN()
	if len(xs) >= 3 && ssTot > 0 {
		r2 = 1 - ssRes/ssTot
	}
	return Line{A: a, B: b, R2: r2}
}
