package e2e

import (
	"testing"
	"time"
)

func TestMedianCI(t *testing.T) {
	seq := func(n int) []time.Duration {
		var ds []time.Duration
		for i := n; i >= 1; i-- { // unsorted on purpose
			ds = append(ds, time.Duration(i))
		}
		return ds
	}
	for _, tc := range []struct {
		n      int
		lo, hi time.Duration
	}{
		{n: 0, lo: 0, hi: 0},
		{n: 1, lo: 1, hi: 1},
		{n: 5, lo: 1, hi: 5},
		// n=30: j = ⌊15 − 5.37⌋ = 9, k = ⌈16 + 5.37⌉ = 22.
		{n: 30, lo: 9, hi: 22},
		// n=100: j = ⌊50 − 9.8⌋ = 40, k = ⌈51 + 9.8⌉ = 61.
		{n: 100, lo: 40, hi: 61},
	} {
		lo, hi := medianCI(seq(tc.n))
		if lo != tc.lo || hi != tc.hi {
			t.Errorf("n=%d: interval %d–%d, want %d–%d", tc.n, lo, hi, tc.lo, tc.hi)
		}
	}
}

func TestVerdict(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		lo, hi time.Duration
		want   string
	}{
		{2 * ms, 5 * ms, "at most 5ms (met)"},
		{5100 * time.Microsecond, 9 * ms, "over 5ms (not met)"},
		{3 * ms, 6 * ms, "across 5ms (this run cannot tell)"},
	} {
		if got := verdict(tc.lo, tc.hi, 5*ms); got != tc.want {
			t.Errorf("verdict(%v, %v) = %q, want %q", tc.lo, tc.hi, got, tc.want)
		}
	}
}
