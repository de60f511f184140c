package executor

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"

	"go.opentelemetry.io/otel/trace"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/toolreg"
)

// Deps is what an executor works with besides its Config.
type Deps struct {
	// Store records the calls; required.
	Store store.Store
	// Tools runs the calls' tools and declares their policies (when
	// Config.Policies is nil); nil means the four built-in tools.
	Tools *toolreg.Registry
	// Logger receives structured logs; nil discards them.
	Logger *slog.Logger
	// OnFinal, if set, is called with a call's id once its completion
	// committed here and the call is final (the server's "Prefer: wait"
	// handlers listen). A scheduled retry is not final and is not told.
	OnFinal func(callID string)
	// Tracer, if set, traces each attempt and its completion (tracing.go);
	// nil: no tracing work.
	Tracer trace.Tracer
}

// instances numbers the executors of this process, so two servers in one
// process (tests, a bench) hold leases under different owners.
var instances atomic.Int64

// New validates cfg, fills its defaults, works out this process's lease
// owner and whether dead-owner recovery can be trusted here, and builds an
// Executor. It starts nothing: call Start.
func New(cfg Config, d Deps) (*Executor, error) {
	if d.Store == nil {
		return nil, errors.New("executor: nil store")
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("executor: %w", err)
	}
	if d.Tools == nil {
		d.Tools = toolreg.Builtins()
	}
	if d.Logger == nil {
		d.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if d.OnFinal == nil {
		d.OnFinal = func(string) {}
	}
	if cfg.Policies == nil {
		cfg.Policies = registryPolicies(d.Tools)
	}
	proc := procFS{root: "/proc"}
	if cfg.proc != nil {
		proc = *cfg.proc
	}
	self, err := proc.self(cfg.InstanceHost)
	// Dead-owner recovery only when liveness is certain; otherwise only
	// lease expiry recovers a crashed server's calls. Without a start time,
	// liveness cannot be told from pid reuse; without a host identity,
	// whose pids they are; with a /proc that hides processes, whether a pid
	// is gone or merely invisible.
	deadOwners, why := err == nil && self.Start != 0, ""
	if !deadOwners {
		why = fmt.Sprintf("process identity incomplete: %v", err)
	} else {
		deadOwners, why = proc.livenessCertain()
	}
	if self.Host == "" {
		self.Host = "unknown-host"
	}
	m := newMetrics()
	if deadOwners {
		m.deadOwnerRecovery.Set(1)
	}
	policy := policyFunc(cfg.Policies)
	e := &Executor{
		st:              d.Store,
		owner:           fmt.Sprintf("%s/%d", self, instances.Add(1)),
		self:            self,
		deadOwners:      deadOwners,
		whyNoDeadOwners: why,
		proc:            proc,
		limit:           newToolLimit(cfg.Workers, policy, d.Tools.Names),
		queue:           &queueGauge{},
		lease:           cfg.Lease,
		interval:        cfg.RecoverInterval,
		grace:           cfg.ShutdownGrace,
		chaos:           cfg.Chaos,
		exit:            cfg.Exit,
		beforeCommit:    cfg.beforeCommit,
		policy:          policy,
		runToolFn:       cfg.runTool,
		onFinal:         d.OnFinal,
		running:         newRunningCalls(),
		tools:           d.Tools,
		lookupFn:        d.Tools.LookupEffect,
		maxResult:       cfg.MaxResultBytes,
		log:             d.Logger,
		m:               m,
		tracer:          d.Tracer,
	}
	e.gates = newGates(policy, d.Tools.Names, cfg.RecoverInterval, e.Wake, m)
	return e, nil
}

// Owner is the lease owner this executor claims calls under:
// "host:pid:starttime/instance", where instance numbers the executors of
// this process. Every worker claims under it: it identifies the server
// process, not a worker.
func (e *Executor) Owner() string { return e.owner }

// Added counts a call the server made pending (a new key, a retry reset)
// in the queue estimate, until the scheduler's next read of the store.
func (e *Executor) Added() { e.queue.added() }

// Pending is the estimated number of pending calls in the whole database
// (see queueGauge for how exact it is): what the back-pressure of new keys
// compares with its limit. It costs no query.
func (e *Executor) Pending() int64 { return e.queue.pending() }

// Cancel cancels the tool of a call this process runs (or is about to
// start): its context ends with the cancel as its cause, and the call is
// recorded canceled (CanceledErrorJSON).
func (e *Executor) Cancel(callID string) { e.running.cancel(callID) }
