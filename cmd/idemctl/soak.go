package main

import (
	"context"
	"errors"
	"fmt"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/idemctl/idemctl/client"
	"github.com/idemctl/idemctl/internal/exitcode"
	"github.com/idemctl/idemctl/internal/serveproc"
	"github.com/idemctl/idemctl/internal/soak"
	"github.com/idemctl/idemctl/internal/store/backend"
)

// soakOptions are the flags of idemctl soak.
type soakOptions struct {
	DB           string
	Instances    int
	Clients      int
	Cycles       int
	MinGap       time.Duration
	MaxGap       time.Duration
	Seed         uint64
	Duration     time.Duration
	PGFaults     bool
	PGRestartCmd string
	Lease        time.Duration
	Pauses       bool
	PauseMin     time.Duration
	PauseMax     time.Duration
	PGPartition  bool
	PartMin      time.Duration
	PartMax      time.Duration
	Base         string
	Token        string
	Binary       string
	Keep         bool
	IgnoreKeys   bool
	DrainTimeout time.Duration
	SampleEvery  time.Duration

	baseSet, cyclesSet bool
	flags              *pflag.FlagSet
}

// Validate checks the flags against each other.
func (o *soakOptions) Validate() error {
	if o.Instances < 1 {
		return fmt.Errorf("--instances must be at least 1, got %d", o.Instances)
	}
	if o.Clients < 1 {
		return fmt.Errorf("--clients must be at least 1, got %d", o.Clients)
	}
	if o.Cycles < 0 {
		return fmt.Errorf("--cycles must be 0 or more, got %d", o.Cycles)
	}
	if o.MinGap <= 0 || o.MaxGap < o.MinGap {
		return fmt.Errorf("want 0 < --min-gap ≤ --max-gap, got %s and %s", o.MinGap, o.MaxGap)
	}
	if o.Duration < 0 || o.DrainTimeout <= 0 || o.SampleEvery <= 0 {
		return errors.New("--duration must not be negative; --drain-timeout and --sample-every must be positive")
	}
	if o.baseSet {
		if err := client.CheckBase(o.Base); err != nil {
			return err
		}
		for _, name := range []string{"db", "instances", "pg-faults", "pg-restart-cmd", "binary", "keep", "downstream-ignore-keys",
			"lease", "pauses", "pause-min", "pause-max", "pg-partition", "partition-min", "partition-max"} {
			if o.flags.Changed(name) {
				return fmt.Errorf("--%s configures the servers soak runs itself and cannot be used with --base", name)
			}
		}
		return nil
	}
	if o.Lease < 0 {
		return fmt.Errorf("--lease must not be negative, got %s", o.Lease)
	}
	if o.Pauses {
		if o.PauseMin <= o.lease() || o.PauseMax < o.PauseMin {
			return fmt.Errorf("want --lease (%s) < --pause-min ≤ --pause-max, got %s and %s: a pause must outlast the lease", o.lease(), o.PauseMin, o.PauseMax)
		}
	}
	if o.PGPartition && (o.PartMin <= 0 || o.PartMax < o.PartMin) {
		return fmt.Errorf("want 0 < --partition-min ≤ --partition-max, got %s and %s", o.PartMin, o.PartMax)
	}
	kind := backend.SQLite
	if o.DB != "" {
		k, _, err := backend.Parse(o.DB)
		if err != nil {
			return fmt.Errorf("--db: %w", err)
		}
		kind = k
	}
	if kind == backend.SQLite {
		if o.Instances > 1 {
			return errors.New("--instances above 1 needs PostgreSQL (--db postgres://...): several servers share one database only there")
		}
		if o.PGFaults || o.PGRestartCmd != "" || o.PGPartition {
			return errors.New("--pg-faults, --pg-restart-cmd and --pg-partition need PostgreSQL (--db postgres://...)")
		}
	}
	return nil
}

// soakPauseLease is the servers' lease with --pauses and no --lease: short,
// so that a pause of a few seconds outlasts it.
const soakPauseLease = 2 * time.Second

// lease is the servers' --lease the soak passes: --lease, or with --pauses
// soakPauseLease; 0 leaves serve's default.
func (o *soakOptions) lease() time.Duration {
	if o.Lease == 0 && o.Pauses {
		return soakPauseLease
	}
	return o.Lease
}

// cycles is the fault count the soak runs: --cycles, or, with --duration
// and no --cycles, faults until the duration ends.
func (o *soakOptions) cycles() int {
	if o.Duration > 0 && !o.cyclesSet {
		return -1
	}
	return o.Cycles
}

func newSoakCmd(streams *IOStreams) *cobra.Command {
	opts := &soakOptions{}
	cmd := &cobra.Command{
		Use:   "soak",
		Short: "Run a seeded mixed workload while killing servers, then check every invariant",
		Long: `Soak idemctl: start --instances servers (this same binary, "serve") on
--db (a temporary SQLite file by default; several instances need PostgreSQL),
send a seeded mixed workload from --clients goroutines (new keys, same-key
retries of answered and unanswered requests, the same key with another
payload, every built-in tool and an http tool against an in-process demo
downstream), and inflict --cycles faults at random gaps: SIGKILL of a random
instance (restarted on the same database and address) or a crash hook that
kills the instance between the downstream's charge and its commit;
--pauses adds freezes of an instance past its lease (SIGSTOP, SIGCONT);
--pg-faults, --pg-restart-cmd and --pg-partition add database faults on
PostgreSQL.

Then drain, read the calls back and check: no acknowledged key lost, at most
one effect per call, an effect exactly for each succeeded effect-tool call,
every call final, a same-payload retry never 409 and another payload always
409, no 5xx while an instance was up, one downstream charge per effect, one
Idempotency-Key and at most one applied effect per call at the downstream,
SQLite's integrity_check; with pauses, that a frozen worker's late
completion was fenced; with partitions, that the cut-off instance answered
in bounded time and served again after the heal. Prints the figures and a verdict; --seed replays the
workload and the fault schedule.

With --base, soak a deployment you run yourself: no kills, the checks the API
allows. Exit status 1 when an invariant broke, 2 for a usage error, 4 when
the soak could not run. See docs/reliability.md.`,
		Example: `  idemctl soak --cycles 20
  idemctl soak --db postgres://localhost/idem --instances 3 --cycles 200 --pg-faults
  idemctl soak --duration 1h --cycles 0
  idemctl soak --base https://idem.internal:8081 --token "$TOKEN" --cycles 50`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			opts.flags = c.Flags()
			opts.baseSet = c.Flags().Changed("base")
			opts.cyclesSet = c.Flags().Changed("cycles")
			if err := opts.Validate(); err != nil {
				return &ExitError{Code: exitcode.Usage, Err: err}
			}
			return runtimeError(runSoak(c.Context(), opts, streams))
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.DB, "db", "", "database the servers use: SQLite path or postgres:// URL (default: a temporary SQLite file)")
	f.IntVar(&opts.Instances, "instances", 1, "serve processes on the database (above 1: PostgreSQL only)")
	f.IntVar(&opts.Clients, "clients", 8, "client goroutines sending the workload")
	f.IntVar(&opts.Cycles, "cycles", 20, "faults to inflict (with --duration and no --cycles: until the duration ends)")
	f.DurationVar(&opts.MinGap, "min-gap", 200*time.Millisecond, "shortest random wait before a fault")
	f.DurationVar(&opts.MaxGap, "max-gap", time.Second, "longest random wait before a fault")
	f.Uint64Var(&opts.Seed, "seed", 0, "seed of the workload and the fault schedule (0: draw one; the verdict prints it)")
	f.DurationVar(&opts.Duration, "duration", 0, "run the load this long and judge WAL and RSS growth (0: until the cycles are done)")
	f.BoolVar(&opts.PGFaults, "pg-faults", false, "also end the servers' PostgreSQL connections (pg_terminate_backend) at random moments")
	f.StringVar(&opts.PGRestartCmd, "pg-restart-cmd", "", "command (run with sh -c) that restarts PostgreSQL; adds restarts under load to the faults")
	f.DurationVar(&opts.Lease, "lease", 0, "the servers' --lease (default: serve's, 30s; with --pauses 2s)")
	f.BoolVar(&opts.Pauses, "pauses", false, "also freeze an instance running tools (SIGSTOP) for longer than its lease, then thaw it (SIGCONT)")
	f.DurationVar(&opts.PauseMin, "pause-min", 3*time.Second, "shortest pause (must exceed the lease)")
	f.DurationVar(&opts.PauseMax, "pause-max", 6*time.Second, "longest pause")
	f.BoolVar(&opts.PGPartition, "pg-partition", false, "route each instance's database connections through a proxy of its own and blackhole one at random moments (PostgreSQL)")
	f.DurationVar(&opts.PartMin, "partition-min", 5*time.Second, "shortest partition")
	f.DurationVar(&opts.PartMax, "partition-max", 30*time.Second, "longest partition")
	addServerFlags(f, &opts.Base, &opts.Token)
	f.Lookup("base").Usage = "soak a deployment you run (no kills, checks over the API) instead of servers of its own"
	f.StringVar(&opts.Binary, "binary", "", "idemctl binary to start as the servers (default: this executable)")
	f.BoolVar(&opts.Keep, "keep", false, "keep the work directory (server logs, the temporary database)")
	f.BoolVar(&opts.IgnoreKeys, "downstream-ignore-keys", false, "start the demo downstream ignoring Idempotency-Key: a broken setup the ledger check must catch")
	f.DurationVar(&opts.DrainTimeout, "drain-timeout", 2*time.Minute, "how long to wait after the load for every call to be final")
	f.DurationVar(&opts.SampleEvery, "sample-every", time.Second, "interval of the WAL-size and RSS samples")
	return cmd
}

// runSoak runs the soak; a broken invariant is exit status exitcode.Failed.
func runSoak(ctx context.Context, opts *soakOptions, streams *IOStreams) error {
	bin := opts.Binary
	if bin == "" && !opts.baseSet {
		var err error
		if bin, err = serveproc.Self(); err != nil {
			return err
		}
	}
	// A closed stdout must not kill soak with SIGPIPE and orphan its servers.
	signal.Ignore(syscall.SIGPIPE)
	defer signal.Reset(syscall.SIGPIPE)
	o := soak.Options{
		Binary: bin, DB: opts.DB, Instances: opts.Instances, Clients: opts.Clients, Cycles: opts.cycles(),
		MinGap: opts.MinGap, MaxGap: opts.MaxGap, Seed: opts.Seed, Duration: opts.Duration,
		PGFaults: opts.PGFaults, PGRestartCmd: opts.PGRestartCmd, IgnoreKeys: opts.IgnoreKeys,
		Lease: opts.lease(), Pauses: opts.Pauses, PauseMin: opts.PauseMin, PauseMax: opts.PauseMax,
		PGPartition: opts.PGPartition, PartitionMin: opts.PartMin, PartitionMax: opts.PartMax,
		DrainTimeout: opts.DrainTimeout, SampleEvery: opts.SampleEvery, Keep: opts.Keep,
		Command: replayCommand(opts), Out: streams.Out,
	}
	if opts.baseSet {
		o.Base, o.Token = opts.Base, opts.Token
	}
	rep, err := soak.Run(ctx, o)
	if err != nil {
		return err
	}
	if rep.Failed() {
		var names []string
		for _, c := range rep.Checks {
			if c.Failed() {
				names = append(names, c.Name)
			}
		}
		return &ExitError{Code: exitcode.Failed, Err: fmt.Errorf("invariant broken: %s (seed %d)", strings.Join(names, ", "), rep.Seed)}
	}
	return nil
}

// replayCommand is the command line that replays this soak, minus --seed:
// the flags that shape the plan, with secrets left out (--token, and the
// database URL redacted).
func replayCommand(o *soakOptions) string {
	parts := []string{"idemctl soak"}
	if o.baseSet {
		parts = append(parts, "--base "+o.Base)
	} else if o.DB != "" {
		parts = append(parts, "--db '"+backend.Redact(o.DB)+"'")
	}
	if o.Instances != 1 {
		parts = append(parts, fmt.Sprintf("--instances %d", o.Instances))
	}
	parts = append(parts, fmt.Sprintf("--clients %d", o.Clients))
	if o.Duration > 0 {
		parts = append(parts, "--duration "+o.Duration.String())
	}
	if o.cycles() >= 0 {
		parts = append(parts, fmt.Sprintf("--cycles %d", o.Cycles))
	}
	parts = append(parts, fmt.Sprintf("--min-gap %s --max-gap %s", o.MinGap, o.MaxGap))
	if o.PGFaults {
		parts = append(parts, "--pg-faults")
	}
	if o.PGRestartCmd != "" {
		parts = append(parts, "--pg-restart-cmd '…'")
	}
	if o.Lease != 0 {
		parts = append(parts, "--lease "+o.Lease.String())
	}
	if o.Pauses {
		parts = append(parts, fmt.Sprintf("--pauses --pause-min %s --pause-max %s", o.PauseMin, o.PauseMax))
	}
	if o.PGPartition {
		parts = append(parts, fmt.Sprintf("--pg-partition --partition-min %s --partition-max %s", o.PartMin, o.PartMax))
	}
	if o.IgnoreKeys {
		parts = append(parts, "--downstream-ignore-keys")
	}
	return strings.Join(parts, " ")
}
