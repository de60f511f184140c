package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/idemctl/idemctl/internal/inspect"
	"github.com/idemctl/idemctl/internal/wire"

	"github.com/idemctl/idemctl/internal/bearer"
)

// stopTimeout bounds stopping the in-process server and the ceiling.
const stopTimeout = 20 * time.Second

// statsTimeout bounds each GET /stats. It is not --request-timeout: that one is a
// parameter of the load (it may be 1ms on purpose), while the bench's own
// bookkeeping must work whatever the load's settings are, or a run whose
// requests all timed out could not report that they did.
const statsTimeout = 10 * time.Second

// Run performs one bench: the load, the drain, the /stats deltas, the
// attempt distribution (in-process server only), the ceiling (if asked) and
// the invariant checks. It writes the report to out in opts.Output and
// returns it; Report.OK is false when an invariant broke. An error means
// the bench itself could not run (bad options, service unreachable).
func Run(ctx context.Context, opts Options, out io.Writer) (rep Report, err error) {
	if err := opts.Validate(); err != nil {
		return Report{}, err
	}
	body, err := opts.requestBody()
	if err != nil {
		return Report{}, err
	}
	runID, err := newRunID()
	if err != nil {
		return Report{}, err
	}
	rep = Report{
		RunID: runID, Tool: opts.Tool, SameKey: opts.SameKey, Concurrency: opts.Concurrency,
		DurationS: opts.Duration.Seconds(), Server: "external", Base: strings.TrimRight(opts.Base, "/"),
		Checks: []Check{},
	}
	client := newHTTPClient(opts.Concurrency, opts.Timeout)
	if opts.Token != "" {
		client = bearer.Client(client, opts.Token)
	}
	defer client.CloseIdleConnections()
	statsClient := &http.Client{Transport: client.Transport, Timeout: statsTimeout}

	var proc *inProcess
	if opts.Base == "" {
		if proc, err = startInProcess(ctx, opts.Workers, opts.Lease); err != nil {
			return Report{}, fmt.Errorf("starting in-process server: %w", err)
		}
		defer func() {
			// Close the client's idle connections first: http.Server.Shutdown
			// waits up to 5s for a connection that never carried a request
			// (the transport may dial one more than it ends up using).
			client.CloseIdleConnections()
			stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopTimeout)
			defer cancel()
			if stopErr := proc.stop(stopCtx); stopErr != nil {
				err = errors.Join(err, fmt.Errorf("stopping in-process server: %w", stopErr))
			}
		}()
		rep.Base, rep.Server, rep.Workers = proc.l.base, "in-process", opts.Workers
	}

	if rep.StatsBefore, err = fetchStats(ctx, statsClient, rep.Base); err != nil {
		return Report{}, err
	}
	effectTool, err := toolEffect(ctx, statsClient, rep.Base, opts.Tool)
	if err != nil {
		return Report{}, err
	}

	key := func(i int) string { return fmt.Sprintf("bench-%s-%d", runID, i) }
	keysSent := func(r loadResult) int { return r.N }
	if opts.SameKey {
		same := fmt.Sprintf("bench-%s-same", runID)
		key = func(int) string { return same }
		keysSent = func(r loadResult) int { return min(r.N, 1) }
	}
	l := &load{
		client: client, url: rep.Base + wire.PathCalls, body: body, key: key, sameKey: opts.SameKey,
		n: opts.N, duration: opts.Duration, concurrency: opts.Concurrency,
		progress: opts.Progress, label: "service",
		lines: opts.ProgressLines, every: opts.ProgressEvery,
		depth: func(ctx context.Context) (int64, error) {
			s, err := fetchStats(ctx, statsClient, rep.Base)
			return s.busy(), err
		},
	}
	res, err := l.run(ctx)
	if err != nil {
		return Report{}, fmt.Errorf("load: %w", err)
	}
	rep.LoadStats, rep.AckedKeys = res.LoadStats, res.ackedKeys

	// After the load: wait for the workers to finish what was accepted, so
	// effects can be compared with acknowledged keys.
	drainStart := time.Now()
	if opts.DrainTimeout > 0 {
		progress, done := drainProgress(opts.Progress)
		if progress == nil {
			progress = drainLines(opts.ProgressLines, opts.ProgressEvery)
		}
		rep.StatsAfter, rep.Drained, err = drain(ctx, statsClient, rep.Base, opts.DrainTimeout, progress)
		done()
		rep.DrainS = time.Since(drainStart).Seconds()
	} else {
		rep.StatsAfter, err = fetchStats(ctx, statsClient, rep.Base)
		rep.Drained = rep.StatsAfter.busy() == 0
	}
	if err != nil {
		return Report{}, err
	}
	rep.CallsDelta = rep.StatsAfter.Calls - rep.StatsBefore.Calls
	rep.EffectsDelta = rep.StatsAfter.Effects - rep.StatsBefore.Effects
	// Accepting a call (the 202) is not running it: the executor's own pace
	// is the calls that reached a final state from the load's start to the
	// end of the drain.
	rep.FinishedDelta = rep.StatsAfter.finished() - rep.StatsBefore.finished()
	if span := rep.WallS + rep.DrainS; span > 0 {
		rep.FinishedRPS = float64(rep.FinishedDelta) / span
	}

	if proc != nil {
		buckets, err := proc.st.Attempts(ctx)
		if err != nil {
			return Report{}, fmt.Errorf("reading attempt distribution: %w", err)
		}
		a := inspect.Distribution(buckets, 0)
		rep.Attempts = &a
	} else {
		rep.AttemptsNote = "skipped: the service is external; run `idemctl inspect attempts --db ...` on its database"
	}

	if opts.Ceiling {
		if rep.Ceiling, err = runCeiling(ctx, l); err != nil {
			return Report{}, err
		}
		if rep.Ceiling.RPS > 0 {
			rep.Ceiling.Fraction = rep.RPS / rep.Ceiling.RPS
		}
	}

	rep.Checks = checks(checkInput{
		sameKey:      opts.SameKey,
		effectTool:   effectTool,
		requests:     res.N,
		answered2xx:  res.answered2xx,
		unexpected:   res.unexpected,
		statuses:     statusLine(res.LoadStats),
		keysSent:     keysSent(res),
		acked:        res.ackedKeys,
		clean:        res.Status0 == 0 && res.serverErrors == 0,
		drainChecked: opts.DrainTimeout > 0,
		drained:      rep.Drained,
		calls:        rep.CallsDelta,
		effects:      rep.EffectsDelta,
	})
	rep.OK = allOK(rep.Checks)
	if err := writeReport(out, opts.Output, rep); err != nil {
		return rep, fmt.Errorf("writing report: %w", err)
	}
	return rep, nil
}

// runCeiling runs the service's load plan, with the same client, against
// the bare handler served by the same kind of http.Server.
func runCeiling(ctx context.Context, service *load) (*Ceiling, error) {
	bare, err := serve(bareHandler())
	if err != nil {
		return nil, fmt.Errorf("ceiling: %w", err)
	}
	defer func() {
		service.client.CloseIdleConnections() // see Run: lets Shutdown return at once
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopTimeout)
		defer cancel()
		_ = bare.stop(stopCtx) // a bare handler holds nothing worth reporting on
	}()
	l := *service
	l.url = bare.base + wire.PathCalls
	l.label = "ceiling"
	res, err := l.run(ctx)
	if err != nil {
		return nil, fmt.Errorf("ceiling load: %w", err)
	}
	return &Ceiling{LoadStats: res.LoadStats}, nil
}
