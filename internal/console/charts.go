package console

import (
	"fmt"
	"strconv"
	"time"

	"github.com/idemctl/idemctl/internal/store"
)

// The charts are SVG drawn here, on the server: the page needs no chart
// library, the numbers are in the HTML (a test reads them), and the CSP
// stays script-free but for console.js. Coordinates are computed in Go;
// the templates only place them.

// Chart geometry, in SVG user units (the SVG scales to its box).
const (
	chartW, chartH = 640, 180
	padL, padR     = 36, 8
	padT, padB     = 10, 22
)

// rateChart is the accept and finish rates per minute as three lines.
type rateChart struct {
	W, H          int
	Minutes       int
	Created       string // polyline points
	Finished      string // succeeded + failed
	Failed        string
	Max           int64
	Grid          []gridLine
	Labels        []axisLabel
	Points        []ratePoint
	TotalCreated  int64
	TotalFinished int64
	TotalFailed   int64
	// PerMinuteNow is the last whole minute's rates.
	LastCreated, LastFinished int64
}

type gridLine struct {
	Y     float64
	Label string
}

type axisLabel struct {
	X      float64
	Label  string
	Anchor string // SVG text-anchor: the last label ends at the edge
}

// ratePoint is one minute, for its hover title.
type ratePoint struct {
	X, W                       float64
	Minute                     string
	Created, Succeeded, Failed int64
}

// niceMax rounds a maximum up to 1, 2 or 5 times a power of ten, so the
// grid lines fall on round numbers.
func niceMax(v int64) int64 {
	if v <= 4 {
		return 4
	}
	for p := int64(1); ; p *= 10 {
		for _, m := range []int64{1, 2, 5} {
			if m*p >= v {
				return m * p
			}
		}
	}
}

func newRateChart(r store.Rates) rateChart {
	c := rateChart{W: chartW, H: chartH, Minutes: len(r.Buckets) - 1}
	if len(r.Buckets) == 0 {
		return c
	}
	var top int64
	for _, b := range r.Buckets {
		top = max(top, b.Created, b.Succeeded+b.Failed)
		c.TotalCreated += b.Created
		c.TotalFinished += b.Succeeded + b.Failed
		c.TotalFailed += b.Failed
	}
	if n := len(r.Buckets); n >= 2 {
		c.LastCreated, c.LastFinished = r.Buckets[n-2].Created, r.Buckets[n-2].Succeeded+r.Buckets[n-2].Failed
	}
	c.Max = niceMax(top)
	plotW, plotH := float64(chartW-padL-padR), float64(chartH-padT-padB)
	step := plotW / float64(max(1, len(r.Buckets)-1))
	x := func(i int) float64 { return float64(padL) + float64(i)*step }
	y := func(v int64) float64 { return float64(padT) + plotH - plotH*float64(v)/float64(c.Max) }
	pts := func(f func(store.RateBucket) int64) string {
		s := ""
		for i, b := range r.Buckets {
			s += fmt.Sprintf("%.1f,%.1f ", x(i), y(f(b)))
		}
		return s
	}
	c.Created = pts(func(b store.RateBucket) int64 { return b.Created })
	c.Finished = pts(func(b store.RateBucket) int64 { return b.Succeeded + b.Failed })
	c.Failed = pts(func(b store.RateBucket) int64 { return b.Failed })
	for i := int64(0); i <= 4; i++ {
		v := c.Max * i / 4
		c.Grid = append(c.Grid, gridLine{Y: y(v), Label: strconv.FormatInt(v, 10)})
	}
	last := len(r.Buckets) - 1
	for _, i := range []int{0, last / 2, last} {
		label, anchor := "now", "end"
		if i != last {
			label, anchor = fmt.Sprintf("−%dm", last-i), "middle"
		}
		if i == 0 {
			anchor = "start"
		}
		c.Labels = append(c.Labels, axisLabel{X: x(i), Label: label, Anchor: anchor})
	}
	for i, b := range r.Buckets {
		c.Points = append(c.Points, ratePoint{X: x(i) - step/2, W: step, Created: b.Created, Succeeded: b.Succeeded,
			Failed: b.Failed, Minute: time.Unix(b.Minute, 0).UTC().Format("15:04")})
	}
	return c
}

// attemptChart is the attempt distribution as bars.
type attemptChart struct {
	W, H  int
	Bars  []attemptBar
	Max   int64
	Total int64
}

type attemptBar struct {
	Attempt        int64
	Calls          int64
	X, Y, BW, BH   float64
	LabelX, LabelY float64
}

// maxAttemptBars bounds the bars; a longer tail is not drawn but counted
// in the table below the chart.
const maxAttemptBars = 16

func newAttemptChart(buckets []store.AttemptBucket) attemptChart {
	c := attemptChart{W: chartW, H: chartH}
	if len(buckets) > maxAttemptBars {
		buckets = buckets[:maxAttemptBars]
	}
	for _, b := range buckets {
		c.Max = max(c.Max, b.Calls)
		c.Total += b.Calls
	}
	if len(buckets) == 0 {
		return c
	}
	plotW, plotH := float64(chartW-padL-padR), float64(chartH-padT-padB-12)
	slot := plotW / float64(len(buckets))
	bw := min(slot*0.7, 80)
	for i, b := range buckets {
		h := plotH * float64(b.Calls) / float64(c.Max)
		if b.Calls > 0 {
			h = max(h, 1)
		}
		x := float64(padL) + float64(i)*slot + (slot-bw)/2
		y := float64(padT+12) + plotH - h
		c.Bars = append(c.Bars, attemptBar{Attempt: b.Attempt, Calls: b.Calls, X: x, Y: y, BW: bw, BH: h,
			LabelX: x + bw/2, LabelY: y - 4})
	}
	return c
}
