// Package failpoint is a registry of armed fault points: it parses a spec
// (Parse) into named points, each with a sequence of actions (crash,
// error, sleep, off), and runs a point's current action when asked
// (Registry.Eval). It is the crash-point matrix's lever: a test arms one
// point with crash or error, loads a real server until the point is
// reached, and checks what survives (docs/failpoints.md). etcd's gofail is
// the model; this is a few hundred lines because idemctl needs four
// actions, not code generation.
//
// The package knows nothing of idemctl and imports none of it: the store
// names its points (store.Failpoints) and runs them through hooks given to
// it at Open and by store.Observe, so a registry is a value passed down,
// never a process-wide switch. `idemctl serve --chaos` builds one from
// IDEMCTL_FAILPOINTS, and only there: serve refuses a set
// IDEMCTL_FAILPOINTS without --chaos, so a production server never runs
// with one, and an unarmed store has no hook at all.
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
	"time"
)

// Name is a failpoint's name. The registry gives names no meaning: the
// code that evaluates points names them (the store's writes: store.Write's
// BeforeCommit and AfterCommit, "create/before-commit"), and Parse accepts
// the names it is given.
type Name string

// EnvVar is the environment variable `idemctl serve --chaos` reads the spec from.
const EnvVar = "IDEMCTL_FAILPOINTS"

// ErrInjected is the error an "error" action returns. The code that runs a
// point decides what it means (the store reports it as its unavailable
// error, so the server answers 503 and a worker retries).
var ErrInjected = errors.New("failpoint: injected error")

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
	known  []Name   // the names Parse accepted, in their order
	spec   []string // name=terms, in known order, for String
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
// appear once, and must be one of known. Errors name the entry and what
// is wrong, and Parse arms nothing. A point's log lines go to slog's
// default logger until SetLogger.
func Parse(spec string, known []Name) (*Registry, error) {
	r := &Registry{points: map[Name]*point{}, known: known, log: slog.Default()}
	isKnown := map[Name]bool{}
	for _, n := range known {
		isKnown[n] = true
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
		case !isKnown[n]:
			errs = append(errs, fmt.Errorf("%q: unknown failpoint %q (known: %s)", entry, n, knownList(known)))
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
	for _, n := range known {
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

func knownList(known []Name) string {
	s := make([]string, len(known))
	for i, n := range known {
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

// String is the spec as armed, in the order of Parse's known names, normalised
// ("create/after-commit=crash;claim/before-commit=sleep(2s)").
func (r *Registry) String() string { return strings.Join(r.spec, ";") }

// Armed lists the armed failpoints, in the order of Parse's known names.
func (r *Registry) Armed() []Name {
	var out []Name
	for _, n := range r.known {
		if r.points[n] != nil {
			out = append(out, n)
		}
	}
	return out
}

// SetLogger sends the line logged each time a point fires to log.
func (r *Registry) SetLogger(log *slog.Logger) {
	if log != nil {
		r.log = log
	}
}

// Eval runs failpoint n: nothing when it is not armed (or r is nil), else
// its current action. It returns ErrInjected (wrapped with the name) for
// an error action and nil otherwise; a crash does not return.
func (r *Registry) Eval(n Name) error {
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
