package executor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/tool"
)

// Defaults of Config's zero values.
const (
	// DefaultWorkers fits I/O-bound tools, which wait far more than they
	// compute: a run is a goroutine and its heartbeat, and an idle
	// executor costs nothing per worker (BENCHMARKS.md, "7. Executor").
	DefaultWorkers = 256
	// DefaultLease is how long a call stays claimed after its worker's
	// last sign of life. Heartbeats extend it while the tool runs, so it
	// bounds the recovery time after a crash, not the tool's run time.
	DefaultLease = 30 * time.Second
	// MinLease is the shortest lease accepted: the heartbeat extends it
	// every third of it, a write per running call each time.
	MinLease               = time.Second
	DefaultRecoverInterval = 200 * time.Millisecond
	DefaultShutdownGrace   = 15 * time.Second
	// DefaultMaxResultBytes is the largest tool result stored (1 MiB, as
	// the request body).
	DefaultMaxResultBytes = 1 << 20
)

// Config configures an Executor; server.Config embeds it. Zero values take
// the defaults above.
type Config struct {
	// Workers is how many tool executions run at once (the global limit;
	// a run is a goroutine, so hundreds are cheap).
	Workers int
	// Lease is how long a claim holds a call after its worker's last
	// heartbeat before another worker may take it over (docs/lifecycle.md,
	// "Leases"). At least MinLease. Heartbeats extend it every Lease/3
	// while the tool runs, so a tool may run longer than Lease.
	Lease time.Duration
	// Chaos enables the _crash_* and _pause_before_commit argument hooks
	// (docs/tools.md, "Chaos hooks"). The server refuses it unless it
	// listens on a loopback address.
	Chaos bool
	// RecoverInterval is the scheduler's tick (200 ms by default): lease
	// recovery and claiming; the dead-owner pass runs at most once per
	// interval however often the scheduler is woken.
	RecoverInterval time.Duration
	// ShutdownGrace bounds how long a stop waits for running tools.
	ShutdownGrace time.Duration
	// MaxResultBytes is the largest tool result stored; a larger one
	// fails the call with result_too_large (not retryable) and no effect.
	// Zero means DefaultMaxResultBytes.
	MaxResultBytes int
	// InstanceHost, if set, replaces the derived host identity in the lease
	// owner (hostname plus a hash of boot id and pid namespace, see hostID).
	// Executors with the same InstanceHost judge each other's pids for
	// dead-owner recovery, so it must name one pid namespace: never give
	// two machines or containers the same value.
	InstanceHost string
	// Policies gives each tool's ToolPolicy (policy.go): server-side
	// retries and a per-tool concurrency cap. Nil means what each tool of
	// the registry declares (DefaultToolPolicy for the others). It is
	// asked often (on every claim, for each tool of the registry, and on
	// every retryable failure), so it must be cheap and safe for
	// concurrent use.
	Policies func(tool string) ToolPolicy
	// Exit ends the process for a chaos crash; nil means os.Exit. Tests
	// set it to observe the crash without losing the test binary.
	Exit func(code int)

	// beforeCommit, if set, runs in the worker between the tool and its
	// completion transaction (tests: pause a worker past its lease).
	beforeCommit func(ctx context.Context, c store.Call)
	// proc overrides where process liveness is read (tests).
	proc *procFS
	// runTool, if set, replaces the registry's Run (tests: a tool that
	// counts its concurrent executions, or fails on demand).
	runTool func(ctx context.Context, inv tool.Invocation) (tool.Outcome, error)
}

// WithDefaults returns c with its zero values replaced by the defaults.
// Policies stays nil: New fills it from the tool registry.
func (c Config) WithDefaults() Config {
	if c.Workers == 0 {
		c.Workers = DefaultWorkers
	}
	if c.Lease == 0 {
		c.Lease = DefaultLease
	}
	if c.RecoverInterval == 0 {
		c.RecoverInterval = DefaultRecoverInterval
	}
	if c.ShutdownGrace == 0 {
		c.ShutdownGrace = DefaultShutdownGrace
	}
	if c.MaxResultBytes == 0 {
		c.MaxResultBytes = DefaultMaxResultBytes
	}
	if c.Exit == nil {
		c.Exit = osExit
	}
	return c
}

// Validate reports every value of c that is out of range, joined. It
// checks c as it is, zeros included: New applies WithDefaults first, and a
// caller that validates ahead of New (serve, before it binds a port or opens
// a database) passes complete values. Its messages name serve's flags, which
// set these fields one to one: serve is where a person reads them.
func (c Config) Validate() error {
	var errs []error
	if c.Workers < 1 {
		errs = append(errs, fmt.Errorf("--workers must be at least 1, got %d", c.Workers))
	}
	if c.Lease < MinLease {
		errs = append(errs, fmt.Errorf("--lease must be at least %s, got %s", MinLease, c.Lease))
	}
	if c.ShutdownGrace < 0 {
		errs = append(errs, fmt.Errorf("--shutdown-grace must not be negative, got %s", c.ShutdownGrace))
	}
	if c.RecoverInterval < 0 {
		errs = append(errs, fmt.Errorf("the recover interval must not be negative, got %s", c.RecoverInterval))
	}
	if c.MaxResultBytes < 1 {
		errs = append(errs, fmt.Errorf("--max-result-bytes must be at least 1, got %d", c.MaxResultBytes))
	}
	if c.InstanceHost != "" {
		if err := checkInstanceHost(c.InstanceHost); err != nil {
			errs = append(errs, fmt.Errorf("--instance-host: %w", err))
		}
	}
	return errors.Join(errs...)
}
