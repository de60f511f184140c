// Package tool is the contract between the executor and a tool of any kind
// (docs/tools.md): one attempt goes in as an Invocation and comes back as an
// Outcome or a ToolError, through a Runner. The simulated tools
// (internal/tool/builtin), http tools (internal/httptool) and the registry
// that dispatches between them (internal/toolreg) all speak it. The chaos
// hook arguments live here too because they apply to every tool, whatever
// its kind.
//
// Tools do not touch the database: a tool with a side effect returns the
// effect row in its Outcome and the caller writes it in the same
// transaction that marks the call succeeded, where effects.call_id UNIQUE
// is the last gate (docs/design.md, "Why effects are unique per call").
package tool

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/wire"
)

// Sentinel errors of validation and Run.
var (
	// ErrUnknownTool: the tool name is not a registered tool.
	ErrUnknownTool = errors.New("unknown tool")
	// ErrInvalidArgs: the arguments do not fit the tool.
	ErrInvalidArgs = errors.New("invalid tool args")
)

// Invocation is one attempt of a call, as handed to a Runner by a worker.
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
// error (docs/api.md, "The call object"). Its JSON is the wire's
// (wire.CallError), so it is defined once.
type ToolError = wire.CallError

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

// Runner runs one attempt of a validated call: builtin.Run for the
// built-in tools, the tool registry for every kind of tool. The executor
// needs nothing else, whatever the tool's kind.
//
// Run returns an Outcome when the tool ran to completion (successfully or
// with a ToolError). A non-nil error means there is no outcome to record:
// ctx was cancelled before the tool finished (the attempt is abandoned and
// the lease will bring the call back), or the invocation is one
// validation would have refused.
type Runner interface {
	Run(ctx context.Context, inv Invocation) (Outcome, error)
}

// RunnerFunc adapts a function to Runner.
type RunnerFunc func(ctx context.Context, inv Invocation) (Outcome, error)

// Run calls f.
func (f RunnerFunc) Run(ctx context.Context, inv Invocation) (Outcome, error) { return f(ctx, inv) }

// LookupVerdict is what a lookup learned (docs/tools.md, "Unknown
// outcomes").
type LookupVerdict int

// The verdicts of a lookup.
const (
	// LookupFound: the downstream has the effect; the call succeeds with
	// LookupAnswer.Found.
	LookupFound LookupVerdict = iota + 1
	// LookupNotFound: the downstream has no such effect; the next attempt
	// may run.
	LookupNotFound
	// LookupFailed: no usable answer (another status, no connection, a
	// timeout): the question stays open and no attempt may run.
	LookupFailed
)

// LookupAnswer is the answer to one lookup.
type LookupAnswer struct {
	Verdict LookupVerdict
	// Status is the downstream's HTTP status; 0 when it did not answer.
	Status int
	// Detail says what the downstream answered, for the audit ("answered
	// 404", "the downstream refused the connection"); never its address
	// or a secret.
	Detail string
	// Found is the success to record when Verdict is LookupFound.
	Found Outcome
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
