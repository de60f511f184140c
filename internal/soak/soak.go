// Package soak is `idemctl soak` (docs/reliability.md): it runs idemctl
// under a seeded mixed workload while killing and restarting its servers
// (and, on PostgreSQL, taking the database away), records every request,
// answer and fault in a history, drains, reads the outcome back and checks
// the invariants of docs/lifecycle.md against the history.
//
// The package is split by role: plan (the seeded generators), workload (the
// clients), instances and faults (the killer), history, observe (reading
// back), checks, sample (WAL and RSS) and report.
package soak

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemctl/idemctl/client"
	"github.com/idemctl/idemctl/internal/blackhole"
	"github.com/idemctl/idemctl/internal/ctxutil"
	"github.com/idemctl/idemctl/internal/downstream"
	"github.com/idemctl/idemctl/internal/store/backend"
)

// Options configure a soak.
type Options struct {
	// Binary is the idemctl executable the servers run (serveproc.Self
	// or a built one).
	Binary string
	// DB is the database: a SQLite path or a PostgreSQL DSN; "" makes a
	// temporary SQLite file.
	DB string
	// Instances is how many servers share DB (PostgreSQL only beyond 1).
	Instances int
	// Clients is how many client goroutines send the workload.
	Clients int
	// Cycles is how many faults to inflict; negative means "until
	// Duration ends".
	Cycles int
	// MinGap and MaxGap bound the random wait before each fault.
	MinGap, MaxGap time.Duration
	// Seed draws the workload and the fault schedule; 0 draws a seed.
	Seed uint64
	// Duration, if positive, runs the load this long (faults stop after
	// Cycles if that is not negative) and judges WAL and RSS growth.
	Duration time.Duration
	// PGFaults adds pg_terminate_backend of the servers' connections.
	PGFaults bool
	// PGRestartCmd, if set, is run with sh -c to restart PostgreSQL.
	PGRestartCmd string
	// Lease, if positive, is the servers' --lease.
	Lease time.Duration
	// Pauses adds pause faults: SIGSTOP of an instance for a length in
	// [PauseMin, PauseMax] (longer than the lease), then SIGCONT.
	Pauses             bool
	PauseMin, PauseMax time.Duration
	// PGPartition routes each instance's database connections through a
	// proxy of its own (PostgreSQL) and adds partition faults of a length
	// in [PartitionMin, PartitionMax].
	PGPartition                bool
	PartitionMin, PartitionMax time.Duration
	// Base, if set, soaks a deployment the user runs: no kills, checks
	// over the API. Token is its bearer token.
	Base, Token string
	// IgnoreKeys starts the demo downstream ignoring Idempotency-Key: a
	// deliberately broken setup the ledger check must catch.
	IgnoreKeys bool
	// DrainTimeout bounds the wait for every call to be final.
	DrainTimeout time.Duration
	// SampleEvery is the WAL/RSS sampling interval.
	SampleEvery time.Duration
	// Keep keeps the work directory (server logs, the temporary database).
	Keep bool
	// TempDir is where the work directory is made ("" = the system's).
	TempDir string
	// Command is the command line without --seed, for the replay line.
	Command string
	Out     io.Writer
}

// FaultKinds is the fault mix o asks for.
func (o Options) FaultKinds() []FaultKind {
	var more []FaultKind
	if o.Pauses {
		more = append(more, FaultPause)
	}
	if o.PGPartition {
		more = append(more, FaultPartition)
	}
	return FaultKinds(o.PGFaults, o.PGRestartCmd != "", more...)
}

// Report is the outcome of a soak.
type Report struct {
	Seed   uint64
	Checks []Check
}

// Failed reports a violated invariant.
func (r *Report) Failed() bool {
	for _, c := range r.Checks {
		if c.Failed() {
			return true
		}
	}
	return false
}

// Run runs one soak and prints its figures and verdict to o.Out. The
// error is a failure to run; violations are in the report.
func Run(ctx context.Context, o Options) (*Report, error) {
	if o.Seed == 0 {
		o.Seed = randomSeed()
	}
	rep := &Report{Seed: o.Seed}
	nonce := randomHex(3)
	prefix := fmt.Sprintf("soak-%d-%s", o.Seed, nonce)
	logf := func(format string, args ...any) { fmt.Fprintf(o.Out, "[soak] "+format+"\n", args...) }
	hist := NewHistory()
	r := &run{o: o, hist: hist, prefix: prefix, logf: logf}
	defer r.cleanup()
	if err := r.setup(ctx); err != nil {
		return rep, err
	}
	if err := r.load(ctx); err != nil {
		return rep, err
	}
	in, err := r.check(ctx)
	if err != nil {
		return rep, err
	}
	rep.Checks = Judge(in)
	rep.Checks = append(rep.Checks, r.resourceCheck())
	r.print(rep, in)
	return rep, nil
}

// run is one soak in progress.
type run struct {
	o      Options
	hist   *History
	prefix string
	logf   func(format string, args ...any)

	dir       string
	walPath   string
	app       string // application_name of the servers' PostgreSQL connections
	adminDSN  string
	ds        *downstream.Server
	dsLog     *requestLog
	lookupDS  *downstream.Server
	proxies   []*blackhole.Proxy
	runningDB *dbObserver
	inst      *instances
	t         *target
	obs       observer
	faults    *faultRunner
	samp      sampler
	cnt       *counters
	inflicted int
	loadTime  time.Duration
	drainTime time.Duration
	drained   bool
	cleanups  []func()
}

func (r *run) cleanup() {
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
}

// own reports whether the soak runs the servers itself (not --base).
func (r *run) own() bool { return r.o.Base == "" }

func (r *run) setup(ctx context.Context) error {
	o := r.o
	if !r.own() {
		var err error
		if r.t, err = newTarget([]string{o.Base}, client.WithToken(o.Token)); err != nil {
			return err
		}
		c, err := client.New(o.Base, client.WithToken(o.Token), client.WithAttemptTimeout(attemptTimeout))
		if err != nil {
			return err
		}
		r.obs = &apiObserver{c: c}
		// Reach it first: an unreachable base is a setup error, not a
		// soak whose every request went unanswered.
		if _, err := c.Stats(ctx); err != nil {
			return fmt.Errorf("reading %s/stats: %w", o.Base, err)
		}
		r.logf("seed %d; soaking %s (no kills: checks over the API); %d clients", o.Seed, o.Base, o.Clients)
		return nil
	}
	dir, err := os.MkdirTemp(o.TempDir, "idemctl-soak-")
	if err != nil {
		return fmt.Errorf("work directory: %w", err)
	}
	r.dir = dir
	r.cleanups = append(r.cleanups, func() {
		if o.Keep {
			r.logf("kept %s (server logs; idemctl inspect --db %s)", dir, displayDB(o.DB, dir))
			return
		}
		_ = os.RemoveAll(dir)
	})
	dsn := o.DB
	if dsn == "" {
		dsn = filepath.Join(dir, "soak.db")
	}
	kind, target, err := backend.Parse(dsn)
	if err != nil {
		return err
	}
	serverDSN, readerDSN := dsn, dsn
	if kind == backend.SQLite {
		if !strings.HasPrefix(strings.ToLower(target), "file:") {
			r.walPath = target + "-wal"
		}
	} else {
		r.app = "idemctl-soak-" + r.prefix[strings.LastIndex(r.prefix, "-")+1:]
		if serverDSN, r.app, err = withAppName(dsn, r.app, false); err != nil {
			return err
		}
		if readerDSN, _, err = withAppName(dsn, r.app+"-reader", true); err != nil {
			return err
		}
		if r.adminDSN, _, err = withAppName(dsn, r.app+"-admin", true); err != nil {
			return err
		}
	}

	// The downstream runs in this process, so its ledger outlives every
	// server kill.
	r.ds = downstream.New(o.IgnoreKeys)
	r.dsLog = &requestLog{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: r.dsLog.wrap(r.ds.Handler()), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	r.cleanups = append(r.cleanups, func() { _ = hs.Close() })
	dsURL := "http://" + ln.Addr().String()
	lookupURL, err := r.startLookupDownstream()
	if err != nil {
		return err
	}
	toolsFile, err := writeTools(dir, dsURL+"/charges", lookupURL)
	if err != nil {
		return err
	}

	instDSN := make([]string, o.Instances)
	for i := range instDSN {
		instDSN[i] = serverDSN
	}
	if o.PGPartition {
		if instDSN, err = r.startProxies(serverDSN, o.Instances); err != nil {
			return err
		}
	}
	args := make([][]string, o.Instances)
	for i := range args {
		args[i] = []string{"--db", instDSN[i], "--chaos", "--tools", toolsFile, "--log-level", "warn"}
		if o.Lease > 0 {
			args[i] = append(args[i], "--lease", o.Lease.String())
		}
	}
	mode := "honours Idempotency-Key"
	if o.IgnoreKeys {
		mode = "IGNORES Idempotency-Key (--downstream-ignore-keys: a broken setup)"
	}
	r.logf("seed %d; work dir %s; database %s (%s); %d instance(s), %d clients; downstream %s (%s); %s's downstream %s (ignores Idempotency-Key, loses %.0f %% of answers)",
		o.Seed, dir, backend.Redact(dsn), kind, o.Instances, o.Clients, dsURL, mode, LookupTool, lookupURL, LookupLoseAnswers*100)
	redact := func(msg string) string {
		for _, secret := range append([]string{serverDSN, dsn}, instDSN...) {
			msg = strings.ReplaceAll(msg, secret, backend.Redact(secret))
		}
		return msg
	}
	r.inst, err = startInstances(ctx, r.hist, o.Binary, dir, args, redact)
	if err != nil {
		return err
	}
	r.cleanups = append(r.cleanups, r.inst.close)
	for i, u := range r.inst.urls() {
		r.logf("instance %d: %s (pid %d)", i, u, r.inst.procs[i].Pid())
	}
	if r.t, err = newTarget(r.inst.urls()); err != nil {
		return err
	}
	dbo, err := openDBObserver(ctx, readerDSN)
	if err != nil {
		return err
	}
	r.obs = dbo
	r.runningDB = dbo
	r.cleanups = append(r.cleanups, dbo.close)
	return nil
}

// startProxies starts one blackhole proxy per instance in front of the
// database of dsn and returns each instance's DSN, pointed at its proxy.
func (r *run) startProxies(dsn string, n int) ([]string, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, errors.New("the PostgreSQL DSN does not parse")
	}
	network, upstream := "tcp", net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
	if strings.HasPrefix(cfg.Host, "/") {
		network, upstream = "unix", filepath.Join(cfg.Host, fmt.Sprintf(".s.PGSQL.%d", cfg.Port))
	}
	out := make([]string, n)
	for i := range n {
		px, err := blackhole.Listen(network, upstream)
		if err != nil {
			return nil, fmt.Errorf("database proxy: %w", err)
		}
		r.proxies = append(r.proxies, px)
		r.cleanups = append(r.cleanups, func() { _ = px.Close() })
		if out[i], err = withHostPort(dsn, px.Addr()); err != nil {
			return nil, err
		}
		r.logf("instance %d reaches the database through %s (--pg-partition)", i, px.Addr())
	}
	return out, nil
}

// withHostPort points a PostgreSQL DSN at addr ("127.0.0.1:PORT"). The
// DSN is never echoed in an error: it may hold a password.
func withHostPort(dsn, addr string) (string, error) {
	host, port, _ := net.SplitHostPort(addr)
	lower := strings.ToLower(dsn)
	if strings.HasPrefix(lower, "postgres://") || strings.HasPrefix(lower, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", errors.New("the PostgreSQL URL does not parse")
		}
		u.Host = addr
		q := u.Query()
		q.Del("host") // a host in the query (a socket directory) would win over the URL's
		q.Del("port")
		u.RawQuery = q.Encode()
		return u.String(), nil
	}
	return dsn + " host=" + host + " port=" + port, nil // key=value: a later keyword wins
}

// requestLog records every request the downstream receives: its
// Idempotency-Key and the soak key (ArgRef) in its body.
type requestLog struct {
	mu   sync.Mutex
	reqs []DownstreamRequest
}

func (l *requestLog) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodGet {
			body, _ := io.ReadAll(io.LimitReader(req.Body, downstream.MaxBody+1))
			req.Body = io.NopCloser(bytes.NewReader(body))
			l.mu.Lock()
			l.reqs = append(l.reqs, DownstreamRequest{Key: req.Header.Get(downstream.HeaderIdempotencyKey), Ref: refOf(body)})
			l.mu.Unlock()
		}
		next.ServeHTTP(w, req)
	})
}

func (l *requestLog) all() []DownstreamRequest {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]DownstreamRequest(nil), l.reqs...)
}

// refOf is the ArgRef of a JSON request body, "" without one.
func refOf(body []byte) string {
	var v map[string]any
	_ = json.Unmarshal(body, &v)
	ref, _ := v[ArgRef].(string)
	return ref
}

// displayDB names the database for the "kept" line.
func displayDB(db, dir string) string {
	if db == "" {
		return filepath.Join(dir, "soak.db")
	}
	return backend.Redact(db)
}

// withAppName sets application_name on a PostgreSQL DSN unless it has one
// (force: set it anyway); it returns the DSN and the name in effect. The
// DSN is never echoed in an error: it may hold a password.
func withAppName(dsn, app string, force bool) (string, string, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return "", "", errors.New("the PostgreSQL DSN does not parse")
	}
	if have := cfg.RuntimeParams["application_name"]; have != "" && !force {
		return dsn, have, nil
	}
	lower := strings.ToLower(dsn)
	if strings.HasPrefix(lower, "postgres://") || strings.HasPrefix(lower, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", "", errors.New("the PostgreSQL URL does not parse")
		}
		q := u.Query()
		q.Set("application_name", app)
		u.RawQuery = q.Encode()
		return u.String(), app, nil
	}
	return dsn + " application_name=" + app, app, nil // key=value: a later keyword wins
}

// LookupLoseAnswers is the share of charges whose answer LookupTool's
// downstream loses.
const LookupLoseAnswers = 0.2

// startLookupDownstream runs LookupTool's downstream in this process (its
// ledger outlives every server kill): it ignores Idempotency-Key and loses
// answers, draws seeded by the soak's seed. It returns its base URL.
func (r *run) startLookupDownstream() (string, error) {
	ds, err := downstream.NewWith(downstream.Options{IgnoreKeys: true, LoseAnswers: LookupLoseAnswers, Seed: r.o.Seed})
	if err != nil {
		return "", err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	hs := &http.Server{Handler: ds.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	r.cleanups = append(r.cleanups, func() { _ = hs.Close() })
	r.lookupDS = ds
	return "http://" + ln.Addr().String(), nil
}

// writeTools writes the servers' tools file: HTTPTool against the soak's
// downstream, LookupTool (on_unknown: lookup) against the one at
// lookupBase, and the gates of two built-ins (docs/tools.md, "Rate
// limits", "Circuit breakers"): send_email is rate-limited (the workload
// sends more than its limit at times, so calls wait pending for tokens),
// and fail is breaker-guarded (its calls fail retryably often enough in a
// row to open the breaker, hold calls pending for the cooldown and probe).
// The checks hold for them as for every call: each acknowledged call
// ends final, once.
func writeTools(dir, chargeURL, lookupBase string) (string, error) {
	schema := map[string]any{"type": "object", "required": []string{"amount"}, "additionalProperties": false,
		"properties": map[string]any{"amount": map[string]any{"type": "integer", "minimum": 1},
			ArgRef: map[string]any{"type": "string"}}}
	doc := map[string]any{"tools": []any{
		map[string]any{"name": HTTPTool, "kind": "http", "url": chargeURL, "timeout": "5s", "schema": schema},
		map[string]any{"name": LookupTool, "kind": "http", "url": lookupBase + "/charges", "timeout": "5s", "schema": schema,
			"on_unknown": "lookup",
			"lookup":     map[string]any{"url": lookupBase + "/charges?idempotency_key={effect_id}"},
			"retry":      map[string]any{"max_attempts": 5, "initial_backoff": "100ms", "max_backoff": "1s"}},
		map[string]any{"name": ToolEmail, "kind": "builtin", "rate": map[string]any{"limit": EmailRate, "per": "1s", "burst": EmailBurst}},
		map[string]any{"name": ToolFail, "kind": "builtin", "breaker": map[string]any{"failures": FailBreakerFailures, "cooldown": FailBreakerCooldown.String()}},
	}}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "tools.yaml")
	return path, os.WriteFile(path, append(b, '\n'), 0o600)
}

// load runs the workload with the faults, then stops it.
func (r *run) load(ctx context.Context) error {
	o := r.o
	stopLoad := make(chan struct{})
	loadDone := make(chan *counters, 1)
	go func() {
		loadDone <- runLoad(ctx, r.hist, r.t, o.Seed, o.Clients, r.own(), r.prefix, stopLoad)
	}()
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		pids := func() []int { return nil }
		if r.inst != nil {
			pids = r.inst.pids
		}
		r.samp.run(r.hist, r.walPath, pids, o.SampleEvery, stopSampling)
	}()

	gen := NewFaultGenerator(o.Seed, o.FaultKinds(), o.MinGap, o.MaxGap)
	durationOver := make(chan struct{})
	if o.Duration > 0 {
		go func() {
			select {
			case <-time.After(o.Duration):
			case <-ctx.Done():
			}
			close(durationOver)
		}()
	}
	if r.own() {
		r.faults = &faultRunner{hist: r.hist, inst: r.inst, send: &sender{hist: r.hist, t: r.t, hard: ctx},
			prefix: r.prefix, log: r.logf, pg: r.adminDSN, app: r.app, restartCmd: o.PGRestartCmd, cmdOut: o.Out,
			lease: o.Lease, pauseMin: o.PauseMin, pauseMax: o.PauseMax, partMin: o.PartitionMin, partMax: o.PartitionMax,
			proxies: r.proxies}
		if r.runningDB != nil {
			r.faults.running = r.runningDB.running
		}
		r.inflicted = r.faults.run(ctx, gen, o.Cycles, durationOver)
	} else {
		// No faults against someone else's deployment: the same gaps, so
		// a run lasts as long as with faults.
		r.idle(ctx, gen, o.Cycles, durationOver)
	}
	if o.Duration > 0 {
		<-durationOver // the faults may end before the duration
	} else if r.own() {
		// A last gap under load after the last fault: recovery happens
		// while clients still send.
		_ = ctxutil.Sleep(ctx, o.MaxGap)
	}
	close(stopLoad)
	r.cnt = <-loadDone
	r.loadTime = r.hist.Now()
	close(stopSampling)
	<-sampled
	if ctx.Err() != nil {
		return errStopped
	}
	return nil
}

// idle waits out cycles gaps of gen (cycles < 0: until stop closes).
func (r *run) idle(ctx context.Context, gen *FaultGenerator, cycles int, stop <-chan struct{}) {
	for n := 0; cycles < 0 || n < cycles; n++ {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-time.After(gen.Next().Gap):
		}
	}
}

// check drains, reads everything back and assembles the checker's input.
func (r *run) check(ctx context.Context) (Input, error) {
	if r.inst != nil && !r.inst.waitAllUp(upWait) {
		r.logf("not every instance is back after %s; draining with the others", upWait)
	}
	var err error
	r.drainTime, r.drained, err = drain(ctx, r.obs, r.o.DrainTimeout)
	if !r.drained {
		r.logf("drain: calls still pending or running after %s (%v)", r.o.DrainTimeout, err)
	}
	attempts, events, keys := r.hist.Snapshot()
	obs, err := r.obs.observe(ctx, keys)
	if err != nil {
		return Input{}, err
	}
	if r.own() {
		for _, ch := range r.ds.Ledger() {
			obs.Ledger = append(obs.Ledger, Charge{ID: ch.ID, Key: ch.Key, Ref: refOf(ch.Request)})
		}
		obs.LedgerRead = true
		obs.Requests, obs.RequestsRead = r.dsLog.all(), true
		for _, ch := range r.lookupDS.Ledger() {
			obs.LookupLedger = append(obs.LookupLedger, Charge{ID: ch.ID, Key: ch.Key, Ref: refOf(ch.Request)})
		}
		obs.LookupLedgerRead = true
		pauses, _ := r.hist.Faults()
		var frozen []string
		for _, p := range pauses {
			for _, c := range p.Calls {
				frozen = append(frozen, c.CallID)
			}
		}
		if obs.Audit, err = r.runningDB.audit(ctx, frozen); err != nil {
			return Input{}, err
		}
		// Stop the servers cleanly before integrity_check.
		r.inst.close()
		// Exits seen after this point are the soak's own stop.
		_, events, _ = r.hist.Snapshot()
		if dbo, ok := r.obs.(*dbObserver); ok {
			obs.Integrity, obs.IntegrityRead, err = dbo.integrity(ctx)
			if err != nil {
				obs.Integrity, obs.IntegrityRead = err.Error(), true
			}
		}
		for _, e := range r.inst.restartErrors() {
			r.logf("%v", e)
		}
	}
	pauses, probes := r.hist.Faults()
	return Input{Attempts: attempts, Events: events, Keys: keys, Observed: obs, Servers: r.own(), Pauses: pauses, Probes: probes}, nil
}

// resourceCheck judges WAL and RSS growth (with --duration only).
func (r *run) resourceCheck() Check {
	c := Check{Name: "bounded_resources", What: fmt.Sprintf("WAL size and each server's RSS: last third's max ≤ %d× first third's max, or at most %d MiB (WAL) / %d MiB (RSS) above it", GrowthFactor, WALFloor>>20, RSSFloor>>20)}
	if r.o.Duration <= 0 {
		c.Skipped = "judged with --duration only"
		return c
	}
	if !r.own() {
		c.Skipped = "the servers of a --base deployment are not the soak's to measure"
		return c
	}
	n := 0
	if r.inst != nil {
		n = len(r.inst.procs)
	}
	for _, g := range growths(r.samp.all(), n) {
		if !g.Judged {
			continue
		}
		c.Checked++
		if !g.Bounded {
			c.Violations = append(c.Violations, Violation{g.Name, fmt.Sprintf("grew from %s (first third) to %s (last third)", mib(g.FirstMax), mib(g.LastMax))})
		}
	}
	if c.Checked == 0 {
		c.Skipped = fmt.Sprintf("fewer than %d samples of every series (sampling every %s)", MinSamples, r.o.SampleEvery)
	}
	return c
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// errStopped is returned when the run was interrupted.
var errStopped = errors.New("soak interrupted")

func randomSeed() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	s := uint64(0)
	for _, x := range b {
		s = s<<8 | uint64(x)
	}
	return s>>1 | 1 // positive as an int64, never 0
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
