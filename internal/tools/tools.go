// Package tools holds the simulated tools idemctl executes (docs/tools.md)
// and the validation of their arguments, including the chaos hook arguments
// (docs/tools.md, "Chaos hooks").
//
// Validation happens before a key is recorded (a refused request stores
// nothing); Run executes one attempt of an already validated call. Tools do
// not touch the database: a tool with a side effect returns the effect row in
// its Outcome and the caller writes it in the same transaction that marks the
// call succeeded, where effects.call_id UNIQUE is the last gate
// (docs/design.md, "Why effects are unique per call").
package tools

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idemctl/idemctl/internal/store"
)

// Tool names (docs/tools.md).
const (
	Charge    = "charge"
	SendEmail = "send_email"
	Sleep     = "sleep"
	Fail      = "fail"
)

// Chaos hook argument names (docs/tools.md, "Chaos hooks"), accepted only when the server runs
// with --chaos.
const (
	ArgCrashAfterCommit  = "_crash_after_commit"
	ArgCrashBeforeCommit = "_crash_before_commit"
	// ArgPauseBeforeCommit takes seconds: the worker waits that long after
	// the tool ran and before its completion commits, as a worker frozen
	// past its lease would (docs/design.md, "The attempt as fencing token").
	ArgPauseBeforeCommit = "_pause_before_commit"
)

// Limits on arguments.
const (
	// MaxChargeAmount caps charge.amount (in minor units). It is far below
	// 2^53, so every accepted amount is an exact int64 and an exact double.
	MaxChargeAmount = 1_000_000_000_000
	// MaxSleepSeconds caps sleep.seconds; the default lease (30s) must stay
	// longer than the longest tool.
	MaxSleepSeconds = 10
	// MaxPauseSeconds caps _pause_before_commit: long enough to outlast a
	// short test lease, short enough that a forgotten pause stays harmless.
	MaxPauseSeconds = 10
)

// ErrorCodeToolFailed is the code of the error a failing tool reports.
const ErrorCodeToolFailed = "tool_failed"

// DefaultFailMessage is the fail tool's message when none is given.
const DefaultFailMessage = "simulated failure"

// Sentinel errors of Validate and Run.
var (
	// ErrUnknownTool: the tool name is not one of Names().
	ErrUnknownTool = errors.New("unknown tool")
	// ErrInvalidArgs: the arguments do not fit the tool.
	ErrInvalidArgs = errors.New("invalid tool args")
)

// Invocation is one attempt of a call, as handed to Run by a worker.
type Invocation struct {
	CallID string
	Tool   string
	// Args are the normalized arguments (fingerprint.Normalize): numbers
	// are json.Number. Plain Go numbers are accepted too.
	Args map[string]any
	// Attempt is the 1-based attempt number returned by the claim.
	Attempt int64
	// Log, if set, is the server's logger for this attempt: what a tool
	// keeps out of the stored outcome (a network error's address, say)
	// goes there for the operator.
	Log *slog.Logger
}

// ToolError is the error object a tool reports; it is stored as the call's
// error (docs/api.md, "The call object"). Retryable tells a same-key request that it may reset the
// call and run it again.
type ToolError struct {
	Code      string `json:"code"`
	Message   string `json:"message"`
	Retryable bool   `json:"retryable"`
	// Status is the downstream HTTP status of an http tool's failure
	// (docs/tools.md, "The http kind"); 0 (omitted) otherwise.
	Status int `json:"status,omitempty"`
	// Body is the downstream's answer to a rejected request: its JSON, or
	// a JSON string when it is not JSON. Omitted when empty.
	Body json.RawMessage `json:"body,omitempty"`
	// RetryAfter is how long the downstream asked to wait before the next
	// attempt (an HTTP Retry-After), 0 if it said nothing. A server-side
	// retry waits at least this long (docs/lifecycle.md, "Server-side
	// retries"). Not part of the stored error object.
	RetryAfter time.Duration `json:"-"`
}

// Error makes a ToolError usable as an error value.
func (e *ToolError) Error() string { return e.Code + ": " + e.Message }

// Outcome is how an attempt ended when the tool ran to completion: either
// Result (with Effect for tools that have a side effect) or Err.
type Outcome struct {
	// Result is the call's result JSON on success; nil when Err is set.
	Result json.RawMessage
	// Effect is the side effect to record with the success, or nil.
	Effect *store.Effect
	// Err is the tool's failure; the call becomes failed.
	Err *ToolError
}

// Runner runs one attempt of a validated call: Run below for the built-in
// tools, the tool registry for every kind of tool. The executor needs
// nothing else, whatever the tool's kind.
type Runner interface {
	Run(ctx context.Context, inv Invocation) (Outcome, error)
}

// RunnerFunc adapts a function to Runner.
type RunnerFunc func(ctx context.Context, inv Invocation) (Outcome, error)

// Run calls f.
func (f RunnerFunc) Run(ctx context.Context, inv Invocation) (Outcome, error) { return f(ctx, inv) }

// Builtin is Run as a Runner.
var Builtin Runner = RunnerFunc(Run)

var names = []string{Charge, Fail, SendEmail, Sleep} // sorted

// Names returns the known tool names, sorted.
func Names() []string { return append([]string(nil), names...) }

// Known reports whether tool is a known tool name.
func Known(tool string) bool {
	return slices.Contains(names, tool)
}

// Validate checks a tool name and its (normalized) arguments. An unknown tool
// wraps ErrUnknownTool; bad arguments wrap ErrInvalidArgs with a message
// that names the argument. Argument names starting with "_" are reserved for
// the chaos hooks: refused unless chaos is true, and then only
// _crash_after_commit and _crash_before_commit with boolean values and
// _pause_before_commit with a number of seconds (0 < s ≤ MaxPauseSeconds).
func Validate(tool string, args map[string]any, chaos bool) error {
	if !Known(tool) {
		return fmt.Errorf("%w %q (known tools: %s)", ErrUnknownTool, tool, strings.Join(names, ", "))
	}
	if err := ValidateChaos(tool, args, chaos); err != nil {
		return err
	}
	_, err := parse(tool, args)
	return err
}

// IsChaosArg reports whether an argument name is reserved for the chaos
// hooks: every name starting with "_" (docs/tools.md, "Chaos hooks").
func IsChaosArg(name string) bool { return strings.HasPrefix(name, "_") }

// ValidateChaos checks only the reserved "_" arguments of a call to tool, by
// the rules Validate applies to them; other arguments are ignored. Tools
// declared in a registry use it so the hooks behave the same on every tool.
func ValidateChaos(tool string, args map[string]any, chaos bool) error {
	for _, name := range sortedKeys(args) {
		if !IsChaosArg(name) {
			continue
		}
		if !chaos {
			return fmt.Errorf("%w: %s: argument %q: names starting with \"_\" are reserved for chaos hooks, which this server does not enable (--chaos)", ErrInvalidArgs, tool, name)
		}
		switch name {
		case ArgCrashAfterCommit, ArgCrashBeforeCommit:
			if _, ok := args[name].(bool); !ok {
				return fmt.Errorf("%w: %s: %s must be a boolean, got %s", ErrInvalidArgs, tool, name, describe(args[name]))
			}
		case ArgPauseBeforeCommit:
			// 0 is refused rather than read as "no pause": a hook that
			// silently does nothing would make a scenario pass vacuously.
			if s, ok := number(args[name]); !ok || s <= 0 || s > MaxPauseSeconds {
				return fmt.Errorf("%w: %s: %s must be a number of seconds above 0 and at most %d, got %s", ErrInvalidArgs, tool, name, MaxPauseSeconds, describe(args[name]))
			}
		default:
			return fmt.Errorf("%w: %s: unknown chaos argument %q (allowed: %s, %s, %s)", ErrInvalidArgs, tool, name,
				ArgCrashAfterCommit, ArgCrashBeforeCommit, ArgPauseBeforeCommit)
		}
	}
	return nil
}

// Chaos is which chaos hooks a call asked for (docs/tools.md, "Chaos hooks"). The server acts
// on it only when it runs with --chaos (Validate refuses the arguments
// otherwise).
type Chaos struct {
	// CrashBeforeCommit: exit after the tool ran, before its transaction commits.
	CrashBeforeCommit bool
	// CrashAfterCommit: exit right after the success transaction commits.
	CrashAfterCommit bool
	// PauseBeforeCommit: wait this long after the tool ran, before its
	// transaction commits (0: no pause).
	PauseBeforeCommit time.Duration
}

// ChaosOf reads the chaos hook arguments; an absent or ill-typed crash
// argument means false, an absent or out-of-range pause means no pause.
func ChaosOf(args map[string]any) Chaos {
	before, _ := args[ArgCrashBeforeCommit].(bool)
	after, _ := args[ArgCrashAfterCommit].(bool)
	c := Chaos{CrashBeforeCommit: before, CrashAfterCommit: after}
	if s, ok := number(args[ArgPauseBeforeCommit]); ok && s > 0 && s <= MaxPauseSeconds {
		c.PauseBeforeCommit = time.Duration(s * float64(time.Second))
	}
	return c
}

// EffectID returns the effect id of a call: "eff_" + the first 8 bytes of
// SHA-256("idemctl-effect:" + callID) in lowercase hex.
//
// It is derived from the call id, not random, on purpose (docs/design.md,
// "Why effects are unique per call"):
// a crash after the side effect but before the success transaction commits
// leaves the call running, recovery runs it again, and the local effects
// table has no row to stop the second attempt. Only the downstream system can,
// and only if every attempt of the call presents the same idempotency key to
// it. A deterministic id gives every attempt, on any worker or instance and
// across restarts, that same key with nothing extra to store before running.
func EffectID(callID string) string {
	sum := sha256.Sum256([]byte("idemctl-effect:" + callID))
	return "eff_" + hex.EncodeToString(sum[:8])
}

// Run executes one attempt of a validated call. It returns an Outcome when
// the tool ran to completion (successfully or with a ToolError). A non-nil
// error means there is no outcome to record: ctx was cancelled before the
// tool finished (ctx.Err(): the attempt is abandoned and the lease will bring
// the call back), or the invocation is one Validate would have refused.
func Run(ctx context.Context, inv Invocation) (Outcome, error) {
	if err := ctx.Err(); err != nil {
		return Outcome{}, err
	}
	p, err := parse(inv.Tool, inv.Args)
	if err != nil {
		return Outcome{}, err
	}
	switch a := p.(type) {
	case chargeArgs:
		eff := EffectID(inv.CallID)
		amount := a.Amount
		return success(chargeResult{Charged: amount, EffectID: eff},
			&store.Effect{EffectID: eff, CallID: inv.CallID, Tool: inv.Tool, Amount: &amount})
	case emailArgs:
		eff := EffectID(inv.CallID)
		return success(emailResult{Sent: true, To: a.To, EffectID: eff},
			&store.Effect{EffectID: eff, CallID: inv.CallID, Tool: inv.Tool})
	case sleepArgs:
		t := time.NewTimer(time.Duration(a.Seconds * float64(time.Second)))
		defer t.Stop()
		select {
		case <-ctx.Done():
			return Outcome{}, ctx.Err()
		case <-t.C:
		}
		return success(sleepResult{Slept: a.Seconds}, nil)
	case failArgs:
		// times: N means attempts 1..N fail and later ones succeed.
		if a.Times != nil && inv.Attempt > *a.Times {
			return success(okResult{OK: true}, nil)
		}
		return Outcome{Err: &ToolError{Code: ErrorCodeToolFailed, Message: a.Message, Retryable: a.Retryable}}, nil
	}
	return Outcome{}, fmt.Errorf("tools: no runner for %q", inv.Tool) // unreachable: parse knows every tool
}

// Result shapes. Structs, so the JSON member order is fixed.
type chargeResult struct {
	Charged  int64  `json:"charged"`
	EffectID string `json:"effect_id"`
}

type emailResult struct {
	Sent     bool   `json:"sent"`
	To       string `json:"to"`
	EffectID string `json:"effect_id"`
}

type sleepResult struct {
	Slept float64 `json:"slept"`
}

type okResult struct {
	OK bool `json:"ok"`
}

func success(result any, eff *store.Effect) (Outcome, error) {
	// Without HTML escaping: a result is stored and served as the tool
	// produced it ("a&b" stays "a&b", not "a\u0026b").
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(result); err != nil {
		return Outcome{}, fmt.Errorf("tools: marshal result: %w", err)
	}
	return Outcome{Result: bytes.TrimRight(buf.Bytes(), "\n"), Effect: eff}, nil
}

// Parsed arguments, one type per tool.
type chargeArgs struct{ Amount int64 }

type emailArgs struct{ To, Subject, Body string }

type sleepArgs struct{ Seconds float64 }

type failArgs struct {
	Retryable bool
	Times     *int64
	Message   string
}

// allowed lists each tool's argument names (chaos "_" names are handled by
// Validate and ignored here).
var allowed = map[string][]string{
	Charge:    {"amount"},
	SendEmail: {"body", "subject", "to"},
	Sleep:     {"seconds"},
	Fail:      {"message", "retryable", "times"},
}

// parse checks and converts a tool's arguments.
func parse(tool string, args map[string]any) (any, error) {
	names, ok := allowed[tool]
	if !ok {
		return nil, fmt.Errorf("%w %q (known tools: %s)", ErrUnknownTool, tool, strings.Join(Names(), ", "))
	}
	for _, name := range sortedKeys(args) {
		if strings.HasPrefix(name, "_") {
			continue
		}
		if !slices.Contains(names, name) {
			return nil, fmt.Errorf("%w: %s: unknown argument %q (allowed: %s)", ErrInvalidArgs, tool, name, strings.Join(names, ", "))
		}
	}
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrInvalidArgs, tool, fmt.Sprintf(format, a...))
	}
	switch tool {
	case Charge:
		v, ok := args["amount"]
		if !ok {
			return nil, bad("amount is required")
		}
		// 1.0 is accepted as 1: it has the same fingerprint, so it must
		// mean the same call.
		n, ok := integer(v)
		if !ok || n < 1 || n > MaxChargeAmount {
			return nil, bad("amount must be an integer from 1 to %d, got %s", int64(MaxChargeAmount), describe(v))
		}
		return chargeArgs{Amount: n}, nil
	case SendEmail:
		to, ok := args["to"].(string)
		if !ok || strings.TrimSpace(to) == "" {
			return nil, bad("to must be a non-empty string, got %s", describe(args["to"]))
		}
		a := emailArgs{To: to}
		for _, f := range []struct {
			name string
			dst  *string
		}{{"subject", &a.Subject}, {"body", &a.Body}} {
			v, present := args[f.name]
			if !present {
				continue
			}
			s, ok := v.(string)
			if !ok {
				return nil, bad("%s must be a string, got %s", f.name, describe(v))
			}
			*f.dst = s
		}
		return a, nil
	case Sleep:
		v, ok := args["seconds"]
		if !ok {
			return nil, bad("seconds is required")
		}
		s, ok := number(v)
		if !ok || s < 0 || s > MaxSleepSeconds {
			return nil, bad("seconds must be a number from 0 to %d, got %s", MaxSleepSeconds, describe(v))
		}
		return sleepArgs{Seconds: s}, nil
	case Fail:
		a := failArgs{Retryable: true, Message: DefaultFailMessage}
		if v, ok := args["retryable"]; ok {
			b, isBool := v.(bool)
			if !isBool {
				return nil, bad("retryable must be a boolean, got %s", describe(v))
			}
			a.Retryable = b
		}
		if v, ok := args["times"]; ok {
			n, isInt := integer(v)
			if !isInt || n < 0 {
				return nil, bad("times must be an integer >= 0, got %s", describe(v))
			}
			a.Times = &n
		}
		if v, ok := args["message"]; ok {
			s, isString := v.(string)
			if !isString {
				return nil, bad("message must be a string, got %s", describe(v))
			}
			if s != "" {
				a.Message = s
			}
		}
		return a, nil
	}
	return nil, fmt.Errorf("%w %q", ErrUnknownTool, tool) // unreachable: allowed has every tool
}

// number converts a JSON number (json.Number, or a Go number) to float64.
func number(v any) (float64, bool) {
	var f float64
	switch x := v.(type) {
	case json.Number:
		var err error
		f, err = strconv.ParseFloat(string(x), 64)
		if err != nil {
			return 0, false
		}
	case float64:
		f = x
	case int:
		f = float64(x)
	case int64:
		f = float64(x)
	default:
		return 0, false
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, false
	}
	return f, true
}

// integer converts a JSON number with an integral value to int64. The
// value, not the spelling, decides: 1.0 and 1e0 are the integer 1, as they
// are for the fingerprint.
func integer(v any) (int64, bool) {
	f, ok := number(v)
	if !ok || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return 0, false
	}
	return int64(f), true
}

// describe renders an argument value for an error message.
func describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "nothing"
	case json.Number:
		return string(x)
	case string:
		if len(x) > 40 {
			x = x[:40] + "..."
		}
		return "string " + strconv.Quote(x)
	case bool:
		return "boolean " + strconv.FormatBool(x)
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	case float64, int, int64:
		return fmt.Sprint(x)
	}
	return fmt.Sprintf("%T", v)
}

func sortedKeys(m map[string]any) []string {
	return slices.Sorted(maps.Keys(m))
}
