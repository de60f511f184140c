package soak

import (
	"os"
	"testing"
)

func TestGrowthRule(t *testing.T) {
	const mb = 1 << 20
	series := func(vals ...int64) []int64 { return vals }
	cases := []struct {
		name    string
		vals    []int64
		floor   int64
		judged  bool
		bounded bool
	}{
		{"flat", series(100*mb, 101*mb, 99*mb, 100*mb, 102*mb, 100*mb, 101*mb, 100*mb, 100*mb), RSSFloor, true, true},
		{"doubles past the floor", series(80*mb, 80*mb, 80*mb, 120*mb, 140*mb, 160*mb, 170*mb, 180*mb, 200*mb), RSSFloor, true, false},
		{"small absolute growth", series(1*mb, 1*mb, 1*mb, 2*mb, 3*mb, 4*mb, 5*mb, 6*mb, 8*mb), WALFloor, true, true},
		{"too few samples", series(1*mb, 900*mb), RSSFloor, false, true},
		{"unknown values left out", series(-1, -1, -1, -1, -1, -1, -1, -1, 1*mb, 500*mb), RSSFloor, false, true},
	}
	for _, tc := range cases {
		g := judge(tc.name, tc.vals, tc.floor)
		if g.Judged != tc.judged || g.Bounded != tc.bounded {
			t.Errorf("%s: judged=%v bounded=%v, want %v %v (%+v)", tc.name, g.Judged, g.Bounded, tc.judged, tc.bounded, g)
		}
	}
}

func TestRSSReadsThisProcess(t *testing.T) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("no /proc on this system")
	}
	if v := rss(os.Getpid()); v <= 0 {
		t.Fatalf("rss = %d", v)
	}
	if v := rss(-1); v != -1 {
		t.Fatalf("rss of a down instance = %d", v)
	}
}
