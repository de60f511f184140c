// Package bench is idemctl's load generator (docs/cli.md, "bench"): it sends N POSTs (or
// runs for a duration) at a given concurrency to /v1/tool-calls, measures
// latency and throughput, reads calls/effects from /stats before and after
// (after the service has drained), checks the idempotency invariants it can
// see, and can measure a bare HTTP handler under the same load in the same
// run so the service's throughput is read against this machine's ceiling.
//
// Without a base URL it starts its own server in-process on a temporary
// SQLite database, and then also reports the attempt distribution.
package bench

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"time"

	"github.com/idemctl/idemctl/internal/executor"
)

// Output formats of the report.
const (
	FormatTable = "table"
	FormatJSON  = "json"
)

// Defaults of the bench flags.
const (
	DefaultN           = 300
	DefaultConcurrency = 20
	DefaultTool        = "charge"
	DefaultTimeout     = 5 * time.Second
	// DefaultWorkers is serve's default, so the in-process server runs
	// tools as a deployed one does.
	DefaultWorkers      = executor.DefaultWorkers
	DefaultDrainTimeout = 30 * time.Second
	// MaxDuration bounds --duration: a bench is a measurement, not a soak.
	MaxDuration = time.Hour
)

// Options configure one bench run.
type Options struct {
	// Base is the service's base URL; "" starts an in-process server on a
	// temporary SQLite database.
	Base string
	// Token, if set, is sent as "Authorization: Bearer" on every request
	// to Base (a server run with --auth-tokens). Never printed.
	Token string
	// N is the number of requests (ignored when Duration > 0).
	N int
	// Concurrency is the number of requests in flight.
	Concurrency int
	// SameKey sends every request with one idempotency key; otherwise each
	// request has its own key.
	SameKey bool
	// Tool is the tool called; Args its arguments (nil = a default per
	// tool: charge {"amount":1}, send_email {"to":...}, sleep
	// {"seconds":0.01}, fail {"retryable":false}).
	Tool string
	Args json.RawMessage
	// Duration, when > 0, runs for that long instead of N requests.
	Duration time.Duration
	// Timeout bounds each request (--request-timeout).
	Timeout time.Duration
	// Workers is the in-process server's worker pool size.
	Workers int
	// Lease is the in-process server's lease (0 = the server's default).
	Lease time.Duration
	// DrainTimeout: after the load, wait for no call to be pending or
	// running, giving up when no call has finished for this long (a stuck
	// service, not a slow one) or after MaxDrain. 0 skips draining, and
	// the checks that need it.
	DrainTimeout time.Duration
	// Ceiling also measures a bare HTTP handler with the same client and
	// load, and reports the service's rps as a fraction of it.
	Ceiling bool
	// Output is FormatTable or FormatJSON.
	Output string
	// Progress, if not nil, receives a progress bar (the command passes
	// stderr when it is a terminal).
	Progress io.Writer
	// ProgressLines, if not nil, receives one plain line every
	// ProgressEvery while the load and the drain run: requests sent, the
	// rate so far and the service's queue depth (calls pending or running).
	// The command passes stderr when it is not a terminal, where a bar
	// would be noise and silence looks like a hang.
	ProgressLines io.Writer
	// ProgressEvery is the interval of ProgressLines (0 =
	// DefaultProgressEvery).
	ProgressEvery time.Duration
}

// DefaultProgressEvery is how often a progress line is printed when stderr
// is not a terminal.
const DefaultProgressEvery = 5 * time.Second

// Validate checks the options and fills defaults for zero values of Tool,
// Timeout, Workers and Output.
func (o *Options) Validate() error {
	if o.Tool == "" {
		o.Tool = DefaultTool
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Workers == 0 {
		o.Workers = DefaultWorkers
	}
	if o.Output == "" {
		o.Output = FormatTable
	}
	if o.ProgressEvery == 0 {
		o.ProgressEvery = DefaultProgressEvery
	}
	var errs []error
	if o.Base != "" {
		u, err := url.Parse(o.Base)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("--base %q: want an http:// or https:// URL", o.Base))
		}
	}
	if o.Token != "" && o.Base == "" {
		errs = append(errs, errors.New("--token needs --base: the in-process server runs without auth"))
	}
	if o.Duration < 0 || o.Duration > MaxDuration {
		errs = append(errs, fmt.Errorf("--duration %s: want 0 < D ≤ %s", o.Duration, MaxDuration))
	}
	if o.Duration == 0 && o.N < 1 {
		errs = append(errs, fmt.Errorf("-n %d: want at least 1 request", o.N))
	}
	if o.Concurrency < 1 || o.Concurrency > 10000 {
		errs = append(errs, fmt.Errorf("-c %d: want 1–10000", o.Concurrency))
	}
	if o.Timeout < 0 {
		errs = append(errs, fmt.Errorf("--request-timeout %s: want > 0", o.Timeout))
	}
	if o.Workers < 1 {
		errs = append(errs, fmt.Errorf("--workers %d: want ≥ 1", o.Workers))
	}
	if o.DrainTimeout < 0 {
		errs = append(errs, fmt.Errorf("--drain-timeout %s: want ≥ 0", o.DrainTimeout))
	}
	if o.Output != FormatTable && o.Output != FormatJSON {
		errs = append(errs, fmt.Errorf("--output %q: accepted: table, json", o.Output))
	}
	if o.Args != nil && !json.Valid(o.Args) {
		errs = append(errs, fmt.Errorf("--args is not valid JSON"))
	}
	if o.Args == nil {
		if _, ok := defaultArgs[o.Tool]; !ok {
			errs = append(errs, fmt.Errorf("--tool %q has no default args; give --args (known: charge, send_email, sleep, fail)", o.Tool))
		}
	}
	return errors.Join(errs...)
}

// defaultArgs are the arguments each known tool is called with.
var defaultArgs = map[string]string{
	"charge":     `{"amount":1}`,
	"send_email": `{"to":"bench@example.invalid","subject":"bench"}`,
	"sleep":      `{"seconds":0.01}`,
	"fail":       `{"retryable":false}`,
}

// requestBody is the POST body for the tool and args.
func (o *Options) requestBody() ([]byte, error) {
	args := o.Args
	if args == nil {
		args = json.RawMessage(defaultArgs[o.Tool])
	}
	return json.Marshal(struct {
		Tool string          `json:"tool"`
		Args json.RawMessage `json:"args"`
	}{o.Tool, args})
}

// newRunID returns 8 random hex digits: keys are bench-<runid>-<i>, so a
// rerun against the same server never replays an earlier run's keys.
func newRunID() (string, error) {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}
