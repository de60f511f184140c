// Package failpoint injects faults at named points around the durable
// writes of the store: before and after each write's commit, on both
// backends (docs/failpoints.md). It is the crash-point matrix's lever: a
// test arms one point with crash or error, loads a real server until the
// point is reached, and checks what survives. etcd's gofail is the model;
// this is a few hundred lines because idemctl needs four actions and one
// switch, not code generation.
//
// Points are armed from a spec (Parse) that `idemctl serve --chaos` reads
// from IDEMCTL_FAILPOINTS, and only there: serve refuses a set
// IDEMCTL_FAILPOINTS without --chaos, so a production server never runs
// with one. Unarmed, a point costs one atomic load (Eval, Enabled).
package failpoint

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemctl/idemctl/internal/store"
)

// Name is a failpoint's name: the write, a slash, and when in its
// transaction the point sits.
type Name string

// The failpoints: one before and one after the commit of each durable write
// (docs/failpoints.md, "Points"). "before-commit" sits inside the write's
// transaction, after its statements ran and before COMMIT (a crash there
// leaves an uncommitted transaction for the database to roll back); it
// fires only when the write changed at least one row. "after-commit" sits
// after the commit, before the caller (a handler, a worker) learns the
// outcome; it fires only when the write committed a change.
const (
	// CreateOrGet: a new call, a retry reset, an alias (dedup).
	CreateBeforeCommit Name = "create/before-commit"
	CreateAfterCommit  Name = "create/after-commit"
	// ClaimNext: pending or expired calls to running.
	ClaimBeforeCommit Name = "claim/before-commit"
	ClaimAfterCommit  Name = "claim/after-commit"
	// ExtendLease: a worker's heartbeat.
	LeaseBeforeCommit Name = "lease/before-commit"
	LeaseAfterCommit  Name = "lease/after-commit"
	// Succeed: the success and its effect row.
	SucceedBeforeCommit Name = "succeed/before-commit"
	SucceedAfterCommit  Name = "succeed/after-commit"
	// Fail: a final failure.
	FailBeforeCommit Name = "fail/before-commit"
	FailAfterCommit  Name = "fail/after-commit"
	// ScheduleRetry: a server-side retry back to pending.
	RetryBeforeCommit Name = "retry/before-commit"
	RetryAfterCommit  Name = "retry/after-commit"
	// RecoverExpired: expired leases back to pending.
	RecoverBeforeCommit Name = "recover/before-commit"
	RecoverAfterCommit  Name = "recover/after-commit"
	// Release: a dead owner's or an abandoned call back to pending.
	ReleaseBeforeCommit Name = "release/before-commit"
	ReleaseAfterCommit  Name = "release/after-commit"
	// Cancel: a pending call failed, or a running one asked to stop.
	CancelBeforeCommit Name = "cancel/before-commit"
	CancelAfterCommit  Name = "cancel/after-commit"
)

// Names lists every failpoint, in the order above. It is the one list:
// Parse accepts only these, the docs and the matrix test range over it.
var Names = []Name{
	CreateBeforeCommit, CreateAfterCommit,
	ClaimBeforeCommit, ClaimAfterCommit,
	LeaseBeforeCommit, LeaseAfterCommit,
	SucceedBeforeCommit, SucceedAfterCommit,
	FailBeforeCommit, FailAfterCommit,
	RetryBeforeCommit, RetryAfterCommit,
	RecoverBeforeCommit, RecoverAfterCommit,
	ReleaseBeforeCommit, ReleaseAfterCommit,
	CancelBeforeCommit, CancelAfterCommit,
}

// EnvVar is the environment variable `idemctl serve --chaos` reads the spec from.
const EnvVar = "IDEMCTL_FAILPOINTS"

// ErrInjected is the error an "error" action returns. It wraps
// store.ErrUnavailable, so the server treats it as the database failing
// the write: 503 unavailable to a request, logged and retried by a worker.
var ErrInjected = fmt.Errorf("failpoint: injected error: %w", store.ErrUnavailable)

// Kind is what an action does.
type Kind int

// The actions.
const (
	// Off: nothing (a placeholder in a sequence: 2*off->crash).
	Off Kind = iota
	// Crash: SIGKILL the process, as kill -9 would: no deferred code runs,
	// nothing is flushed.
	Crash
	// Error: the write fails with ErrInjected (before commit: it is rolled
	// back; after commit: it is durable, but the caller is told it failed).
	Error
	// Sleep: wait, then go on (before commit: holding the transaction and
	// its locks).
	Sleep
)

// term is one step of a failpoint's sequence: do kind, count times (0:
// for ever).
type term struct {
	kind  Kind
	sleep time.Duration
	count int
}

func (t term) String() string {
	var s string
	switch t.kind {
	case Off:
		s = "off"
	case Crash:
		s = "crash"
	case Error:
		s = "error"
	case Sleep:
		s = "sleep(" + t.sleep.String() + ")"
	}
	if t.count > 0 {
		s = strconv.Itoa(t.count) + "*" + s
	}
	return s
}

// point is one armed failpoint: its sequence and where it is in it.
type point struct {
	name  Name
	mu    sync.Mutex
	terms []term
	used  int // evaluations consumed of terms[0]
}

// next returns the action of this evaluation and moves the sequence on.
// A sequence whose counted terms are all used up is off.
func (p *point) next() term {
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.terms) > 0 {
		t := p.terms[0]
		if t.count == 0 {
			return t
		}
		if p.used < t.count {
			p.used++
			return t
		}
		p.terms, p.used = p.terms[1:], 0
	}
	return term{kind: Off}
}

// Registry is a parsed spec: the armed failpoints.
type Registry struct {
	points map[Name]*point
	spec   []string // name=terms, in Names order, for String
	log    *slog.Logger
}

// Parse reads a spec:
//
//	spec   = entry { ";" entry }
//	entry  = name "=" terms
//	terms  = term { "->" term }
//	term   = [ count "*" ] action
//	action = "off" | "crash" | "error" | "sleep(" duration ")"
//
// count is a positive integer; duration is Go's (250ms, 2s). A term with
// a count applies to that many evaluations, then the next term takes over;
// a term without one applies for ever. When the counted terms are used up
// the point is off: "1*crash" crashes once, "2*off->crash" lets two
// evaluations pass and crashes on the third. Blanks around the separators
// are ignored; an empty entry (a trailing ";") is allowed. A name may
// appear once. Errors name the entry and what is wrong, and Parse arms
// nothing.
func Parse(spec string) (*Registry, error) {
	r := &Registry{points: map[Name]*point{}}
	known := map[Name]bool{}
	for _, n := range Names {
		known[n] = true
	}
	var errs []error
	for _, entry := range strings.Split(spec, ";") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		name, terms, ok := strings.Cut(entry, "=")
		n := Name(strings.TrimSpace(name))
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("%q: want name=action", entry))
			continue
		case !known[n]:
			errs = append(errs, fmt.Errorf("%q: unknown failpoint %q (known: %s)", entry, n, knownList()))
			continue
		case r.points[n] != nil:
			errs = append(errs, fmt.Errorf("%q: failpoint %s given twice", entry, n))
			continue
		}
		ts, err := parseTerms(terms)
		if err != nil {
			errs = append(errs, fmt.Errorf("%q: %w", entry, err))
			continue
		}
		r.points[n] = &point{name: n, terms: ts}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("%s: %w", EnvVar, err)
	}
	for _, n := range Names {
		if p := r.points[n]; p != nil {
			parts := make([]string, len(p.terms))
			for i, t := range p.terms {
				parts[i] = t.String()
			}
			r.spec = append(r.spec, string(n)+"="+strings.Join(parts, "->"))
		}
	}
	return r, nil
}

func knownList() string {
	s := make([]string, len(Names))
	for i, n := range Names {
		s[i] = string(n)
	}
	sort.Strings(s)
	return strings.Join(s, ", ")
}

func parseTerms(s string) ([]term, error) {
	var out []term
	for _, raw := range strings.Split(s, "->") {
		raw = strings.TrimSpace(raw)
		var t term
		if c, rest, ok := strings.Cut(raw, "*"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(c))
			if err != nil || n < 1 {
				return nil, fmt.Errorf("count %q: want a positive integer", c)
			}
			t.count, raw = n, strings.TrimSpace(rest)
		}
		switch {
		case raw == "off":
			t.kind = Off
		case raw == "crash":
			t.kind = Crash
		case raw == "error":
			t.kind = Error
		case strings.HasPrefix(raw, "sleep(") && strings.HasSuffix(raw, ")"):
			d, err := time.ParseDuration(strings.TrimSpace(raw[len("sleep(") : len(raw)-1]))
			if err != nil || d < 0 {
				return nil, fmt.Errorf("sleep: want a duration such as 2s, got %q", raw)
			}
			t.kind, t.sleep = Sleep, d
		default:
			return nil, fmt.Errorf("action %q: want off, crash, error or sleep(duration)", raw)
		}
		out = append(out, t)
	}
	return out, nil
}

// String is the spec as armed, in Names order, normalised
// ("create/after-commit=crash;claim/before-commit=sleep(2s)").
func (r *Registry) String() string { return strings.Join(r.spec, ";") }

// Armed lists the armed failpoints, in Names order.
func (r *Registry) Armed() []Name {
	var out []Name
	for _, n := range Names {
		if r.points[n] != nil {
			out = append(out, n)
		}
	}
	return out
}

// active is the armed registry; nil (the production case) means every
// point is off.
var active atomic.Pointer[Registry]

// Enable arms r for the whole process; nil disarms. log receives a line
// each time a point fires (nil: slog's default).
func Enable(r *Registry, log *slog.Logger) {
	if r != nil {
		if log == nil {
			log = slog.Default()
		}
		r.log = log
	}
	active.Store(r)
}

// Enabled reports whether any failpoint is armed: one atomic load. Code
// that must do extra work to reach a point (read whether a transaction
// wrote anything) asks this first.
func Enabled() bool { return active.Load() != nil }

// Eval runs failpoint n: nothing when it is not armed (one atomic load),
// else its current action. It returns ErrInjected (wrapped with the name)
// for an error action and nil otherwise; a crash does not return.
func Eval(n Name) error {
	r := active.Load()
	if r == nil {
		return nil
	}
	p := r.points[n]
	if p == nil {
		return nil
	}
	t := p.next()
	switch t.kind {
	case Crash:
		// Straight to stderr, unbuffered: the one trace a crash leaves,
		// and the matrix test's proof of which point killed the process.
		fmt.Fprintf(os.Stderr, "idemctl: failpoint %s: crash (SIGKILL)\n", n)
		crash()
	case Error:
		r.log.Warn("failpoint: injected error", "failpoint", string(n))
		return fmt.Errorf("failpoint %s: %w", n, ErrInjected)
	case Sleep:
		r.log.Warn("failpoint: sleeping", "failpoint", string(n), "sleep", t.sleep.String())
		time.Sleep(t.sleep)
	}
	return nil
}
