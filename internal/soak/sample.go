package soak

// Resource samples for long soaks: the SQLite WAL file's size and each
// serve process's resident memory (VmRSS in /proc/PID/status, Linux), and
// the rule that says they stayed bounded.

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Growth rule: a series is bounded if the largest value of its last third
// is at most GrowthFactor times the largest of its first third, or exceeds
// it by at most its floor (small absolute growth is noise: a WAL grows to
// its checkpoint size, a Go heap to its working set). Fewer than
// MinSamples samples decide nothing.
const (
	GrowthFactor = 2
	WALFloor     = 16 << 20
	RSSFloor     = 64 << 20
	MinSamples   = 9
)

// Sample is one measurement: WAL bytes (-1 without a WAL file to read) and
// the RSS bytes of each instance (-1 while it is down).
type Sample struct {
	At  time.Duration
	WAL int64
	RSS []int64
}

// sampler measures every interval until stop.
type sampler struct {
	mu      sync.Mutex
	samples []Sample
}

func (s *sampler) run(hist *History, walPath string, pids func() []int, every time.Duration, stop <-chan struct{}) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		s.take(hist, walPath, pids)
		select {
		case <-stop:
			return
		case <-t.C:
		}
	}
}

func (s *sampler) take(hist *History, walPath string, pids func() []int) {
	smp := Sample{At: hist.Now(), WAL: -1}
	if walPath != "" {
		if fi, err := os.Stat(walPath); err == nil {
			smp.WAL = fi.Size()
		} else if os.IsNotExist(err) {
			smp.WAL = 0
		}
	}
	for _, pid := range pids() {
		smp.RSS = append(smp.RSS, rss(pid))
	}
	s.mu.Lock()
	s.samples = append(s.samples, smp)
	s.mu.Unlock()
}

func (s *sampler) all() []Sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Sample(nil), s.samples...)
}

// rss reads VmRSS of pid in bytes, -1 if unknown.
func rss(pid int) int64 {
	if pid <= 0 {
		return -1
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			fields := strings.Fields(v) // "12345 kB"
			if len(fields) >= 1 {
				if kb, err := strconv.ParseInt(fields[0], 10, 64); err == nil {
					return kb << 10
				}
			}
		}
	}
	return -1
}

// Growth is the verdict on one series.
type Growth struct {
	Name              string
	Samples           int   // known values
	FirstMax, LastMax int64 // the largest value of the first and last third
	Floor             int64
	Bounded, Judged   bool
}

// judge applies the growth rule to values (negative ones are unknown and
// left out).
func judge(name string, values []int64, floor int64) Growth {
	var known []int64
	for _, v := range values {
		if v >= 0 {
			known = append(known, v)
		}
	}
	g := Growth{Name: name, Samples: len(known), Floor: floor, Bounded: true}
	if len(known) < MinSamples {
		return g
	}
	third := len(known) / 3
	for _, v := range known[:third] {
		g.FirstMax = max(g.FirstMax, v)
	}
	for _, v := range known[len(known)-third:] {
		g.LastMax = max(g.LastMax, v)
	}
	g.Judged = true
	g.Bounded = g.LastMax <= GrowthFactor*g.FirstMax || g.LastMax-g.FirstMax <= floor
	return g
}

// growths judges the WAL series and each instance's RSS series.
func growths(samples []Sample, instances int) []Growth {
	var out []Growth
	wal := make([]int64, len(samples))
	for i, s := range samples {
		wal[i] = s.WAL
	}
	out = append(out, judge("wal", wal, WALFloor))
	for in := range instances {
		v := make([]int64, len(samples))
		for i, s := range samples {
			v[i] = -1
			if in < len(s.RSS) {
				v[i] = s.RSS[in]
			}
		}
		out = append(out, judge(fmt.Sprintf("rss[%d]", in), v, RSSFloor))
	}
	return out
}
