package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemctl/idemctl/internal/wire"
	"github.com/schollz/progressbar/v3"
)

// LoadStats is what one load run measured. It is embedded in Report (the
// service) and Ceiling (the bare handler), so both read the same in JSON.
type LoadStats struct {
	// N is the number of requests sent.
	N int `json:"n"`
	// WallS is the wall time of the whole load, in seconds.
	WallS float64 `json:"wall_s"`
	// RPS is N / WallS.
	RPS float64 `json:"rps"`
	// LatencyMS is over the requests that got a response.
	LatencyMS Latency `json:"latency_ms"`
	// Status counts responses by HTTP status ("202": 300).
	Status map[string]int `json:"status"`
	// Status0 counts requests that got no response (timeout, refused, reset).
	Status0 int `json:"status0"`
	// Errors holds up to maxErrors distinct transport errors behind status0.
	Errors []string `json:"errors"`
	// Refusals holds up to maxErrors distinct summaries of answers that were
	// neither 2xx nor back-pressure (429, 503), e.g. "HTTP 400 bad_request:
	// ...": what made the run fail its no_unexpected_status check.
	Refusals []string `json:"refusals"`
}

// Latency percentiles in milliseconds (nearest rank).
type Latency struct {
	P50  float64 `json:"p50"`
	P95  float64 `json:"p95"`
	P99  float64 `json:"p99"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
}

// maxErrors caps the distinct error messages kept for the report.
const maxErrors = 5

// load is one load run's plan.
type load struct {
	client      *http.Client
	url         string // full POST URL
	body        []byte
	key         func(i int) string
	sameKey     bool // key returns one key for every i
	n           int
	duration    time.Duration
	concurrency int
	progress    io.Writer
	label       string
	// lines, if not nil, gets a progress line every `every`; depth, if not
	// nil, reads the service's queue depth for it.
	lines io.Writer
	every time.Duration
	depth func(context.Context) (int64, error)
}

// loadResult is a run's raw outcome.
type loadResult struct {
	LoadStats
	// ackedKeys is the number of distinct keys that got a 2xx.
	ackedKeys int
	// serverErrors counts 5xx responses.
	serverErrors int
	// answered2xx counts 2xx responses (not keys: same-key runs repeat one).
	answered2xx int
	// backpressure counts 429 and 503: the service saying "not now".
	backpressure int
	// unexpected counts every other non-2xx response.
	unexpected int
}

// worker-local tallies, merged after the run: no lock on the hot path.
type tally struct {
	lat     []time.Duration
	status  map[int]int
	status0 int
	errs    []string
	ok2xx   int      // responses 2xx
	refused []string // distinct summaries of unexpected answers, ≤ maxErrors
}

// backpressureStatus reports whether code is the service's documented
// "not now" (docs/api.md, "Errors": clients retry on 429 and 503). Under overload
// these are a result worth reporting, not a broken run.
func backpressureStatus(code int) bool {
	return code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable
}

// unexpectedStatus reports whether a response is neither an
// acknowledgement (2xx) nor back-pressure.
func unexpectedStatus(code int) bool {
	return (code < 200 || code > 299) && !backpressureStatus(code)
}

// newHTTPClient returns the one client every request of a bench uses, the
// service's and the ceiling's alike. Its transport keeps c idle connections
// per host so c workers reuse connections instead of dialing per request.
func newHTTPClient(concurrency int, timeout time.Duration) *http.Client {
	tr := &http.Transport{
		Proxy:               nil, // a bench of a loopback service must never go through an env proxy
		DialContext:         (&net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        2 * concurrency, // service and ceiling hosts
		MaxIdleConnsPerHost: concurrency,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	return &http.Client{Transport: tr, Timeout: timeout}
}

// run sends the load and measures it. Requests aborted because ctx was
// cancelled are not counted; run then returns ctx's error.
func (l *load) run(ctx context.Context) (loadResult, error) {
	var bar *progressbar.ProgressBar
	if l.progress != nil {
		total := int64(l.n)
		if l.duration > 0 {
			total = -1 // unknown length: a spinner with a count
		}
		bar = progressbar.NewOptions64(total,
			progressbar.OptionSetWriter(l.progress),
			progressbar.OptionSetDescription(l.label),
			progressbar.OptionShowCount(),
			progressbar.OptionShowIts(),
			progressbar.OptionSetItsString("req"),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionClearOnFinish(),
		)
	}

	var next atomic.Int64
	var deadline time.Time
	tallies := make([]*tally, l.concurrency)
	var wg sync.WaitGroup
	start := time.Now()
	if l.duration > 0 {
		deadline = start.Add(l.duration)
	}
	var sent atomic.Int64
	stopLines := l.progressLines(ctx, start, &sent)
	for w := range l.concurrency {
		t := &tally{status: map[int]int{}}
		if l.duration == 0 {
			t.lat = make([]time.Duration, 0, l.n/l.concurrency+1) // no regrowth during the load
		}
		tallies[w] = t
		wg.Go(func() {
			for ctx.Err() == nil {
				if l.duration > 0 && !time.Now().Before(deadline) {
					return
				}
				i := int(next.Add(1) - 1)
				if l.duration == 0 && i >= l.n {
					return
				}
				l.one(ctx, t, i)
				sent.Add(1)
				if bar != nil {
					_ = bar.Add(1) // the bar is drawing only; its error is not the bench's
				}
			}
		})
	}
	wg.Wait()
	wall := time.Since(start)
	stopLines()
	if bar != nil {
		_ = bar.Finish()
	}
	if err := ctx.Err(); err != nil {
		return loadResult{}, err
	}
	return merge(tallies, wall, l.sameKey), nil
}

// progressLines starts printing a line to l.lines every l.every until the
// returned function is called (which waits for the printer to stop). With
// no l.lines it does nothing.
func (l *load) progressLines(ctx context.Context, start time.Time, sent *atomic.Int64) (stop func()) {
	if l.lines == nil {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(l.every)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			elapsed := time.Since(start)
			n := sent.Load()
			depth := "unknown"
			if l.depth != nil {
				if d, err := l.depth(ctx); err == nil {
					depth = strconv.FormatInt(d, 10)
				}
			}
			fmt.Fprintf(l.lines, "bench: %s: %d sent in %s, %.0f req/s, queue depth %s\n",
				l.label, n, elapsed.Round(time.Second), float64(n)/elapsed.Seconds(), depth)
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

// one sends request i and records its outcome in t.
func (l *load) one(ctx context.Context, t *tally, i int) {
	key := l.key(i)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, l.url, bytes.NewReader(l.body))
	if err != nil {
		t.status0++
		t.addErr(err.Error())
		return
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(wire.HeaderIdempotencyKey, key)
	// net/http treats a request with an Idempotency-Key header as
	// replayable and silently resends it when a reused connection fails.
	// Without GetBody it cannot: every request is sent exactly once, so a
	// dropped reply shows up as status0 instead of being hidden by a retry.
	req.GetBody = nil
	start := time.Now()
	resp, err := l.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return // aborted by us, not a failure of the service
		}
		t.status0++
		t.addErr(err.Error())
		return
	}
	// The body is read to the end, so the
	// latency includes the whole reply and the connection can be reused.
	// An unexpected answer's head is kept to say why it came (the 2xx hot
	// path reads nothing into memory).
	var head []byte
	keep := unexpectedStatus(resp.StatusCode) && len(t.refused) < maxErrors
	if keep {
		head, _ = io.ReadAll(io.LimitReader(resp.Body, maxRefusalBody))
	}
	_, copyErr := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if copyErr != nil {
		if ctx.Err() != nil {
			return
		}
		t.status0++
		t.addErr("reading body: " + copyErr.Error())
		return
	}
	t.lat = append(t.lat, time.Since(start))
	t.status[resp.StatusCode]++
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		t.ok2xx++
	}
	if keep {
		if msg := refusal(resp.StatusCode, head); !slices.Contains(t.refused, msg) {
			t.refused = append(t.refused, msg)
		}
	}
}

// maxRefusalBody is how much of an unexpected answer's body is read for
// its summary; maxRefusalText caps the summary's message.
const (
	maxRefusalBody = 4 << 10
	maxRefusalText = 200
)

// refusal summarizes an unexpected answer: "HTTP 400 bad_request: message"
// for the service's error shape, else the start of the body.
func refusal(code int, body []byte) string {
	var e wire.Error
	msg := strings.TrimSpace(string(body))
	if json.Unmarshal(body, &e) == nil && e.Error.Code != "" {
		msg = e.Error.Code + ": " + e.Error.Message
	}
	if len(msg) > maxRefusalText {
		msg = msg[:maxRefusalText] + "…"
	}
	if msg == "" {
		return fmt.Sprintf("HTTP %d", code)
	}
	return fmt.Sprintf("HTTP %d %s", code, msg)
}

// addErr keeps the first maxErrors distinct messages.
func (t *tally) addErr(msg string) {
	if len(t.errs) < maxErrors && !slices.Contains(t.errs, msg) {
		t.errs = append(t.errs, msg)
	}
}

// merge combines the workers' tallies into one result. Keys are either all
// distinct (one per request) or all the same, so the acknowledged distinct
// keys are counted without keeping a set of them on the hot path.
func merge(tallies []*tally, wall time.Duration, sameKey bool) loadResult {
	r := loadResult{LoadStats: LoadStats{Status: map[string]int{}, Errors: []string{}, Refusals: []string{}}}
	var lat []time.Duration
	ok2xx := 0
	for _, t := range tallies {
		lat = append(lat, t.lat...)
		r.Status0 += t.status0
		for code, n := range t.status {
			r.Status[strconv.Itoa(code)] += n
			r.N += n
			if code >= 500 {
				r.serverErrors += n
			}
			switch {
			case code >= 200 && code <= 299:
				r.answered2xx += n
			case backpressureStatus(code):
				r.backpressure += n
			default:
				r.unexpected += n
			}
		}
		for _, e := range t.errs {
			if len(r.Errors) < maxErrors && !slices.Contains(r.Errors, e) {
				r.Errors = append(r.Errors, e)
			}
		}
		for _, e := range t.refused {
			if len(r.Refusals) < maxErrors && !slices.Contains(r.Refusals, e) {
				r.Refusals = append(r.Refusals, e)
			}
		}
		ok2xx += t.ok2xx
	}
	r.N += r.Status0
	r.ackedKeys = ok2xx
	if sameKey {
		r.ackedKeys = min(ok2xx, 1)
	}
	r.WallS = wall.Seconds()
	if r.WallS > 0 {
		r.RPS = float64(r.N) / r.WallS
	}
	r.LatencyMS = percentiles(lat)
	return r
}

// percentiles computes nearest-rank percentiles in milliseconds.
func percentiles(lat []time.Duration) Latency {
	if len(lat) == 0 {
		return Latency{}
	}
	slices.Sort(lat)
	rank := func(p float64) float64 {
		// Nearest rank: the smallest value with at least p of the samples at or below it.
		i := int(math.Ceil(p*float64(len(lat)))) - 1
		i = max(0, min(i, len(lat)-1))
		return ms(lat[i])
	}
	var sum time.Duration
	for _, d := range lat {
		sum += d
	}
	return Latency{
		P50: rank(0.50), P95: rank(0.95), P99: rank(0.99),
		Max:  ms(lat[len(lat)-1]),
		Mean: ms(sum / time.Duration(len(lat))),
	}
}

// ms converts a duration to milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// String renders the latency line of the text report.
func (l Latency) String() string {
	return fmt.Sprintf("p50=%.2fms  p95=%.2fms  p99=%.2fms  max=%.2fms", l.P50, l.P95, l.P99, l.Max)
}

// drainLines returns a callback that writes a line to w about the drain at
// most once per every, the first after every (nil when w is nil): a short
// drain prints nothing.
func drainLines(w io.Writer, every time.Duration) func(busy int64) {
	if w == nil {
		return nil
	}
	start := time.Now()
	last := start
	return func(busy int64) {
		now := time.Now()
		if now.Sub(last) < every {
			return
		}
		last = now
		fmt.Fprintf(w, "bench: draining: queue depth %d after %s\n", busy, now.Sub(start).Round(time.Second))
	}
}

// drainProgress returns a callback drawing the drain on w (nil: no bar) and
// a function that finishes the bar.
func drainProgress(w io.Writer) (func(busy int64), func()) {
	if w == nil {
		return nil, func() {}
	}
	var bar *progressbar.ProgressBar
	var first int64
	update := func(busy int64) {
		if bar == nil {
			first = busy
			bar = progressbar.NewOptions64(max(first, 1),
				progressbar.OptionSetWriter(w),
				progressbar.OptionSetDescription("draining"),
				progressbar.OptionShowCount(),
				progressbar.OptionThrottle(100*time.Millisecond),
				progressbar.OptionClearOnFinish(),
			)
		}
		_ = bar.Set64(max(0, first-busy)) // drawing only
	}
	return update, func() {
		if bar != nil {
			_ = bar.Finish()
		}
	}
}
