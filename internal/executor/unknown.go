package executor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/idemctl/idemctl/internal/logkey"
	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/tool"
	"github.com/idemctl/idemctl/internal/toolreg"
	"github.com/idemctl/idemctl/internal/wire"
)

// A call whose previous attempt's outcome is unknown (store.Call.Unknown:
// a timeout or a lost connection after the request was sent, or an attempt
// abandoned in flight) is not simply run again: the tool's on_unknown
// decides first (docs/tools.md, "Unknown outcomes"). retry runs it; lookup
// asks the downstream whether the effect happened; hold fails the call for
// an operator to settle.

// settle is how the unknown outcome of a claimed call stands before its
// attempt.
type settle int

const (
	// runAttempt: nothing to settle, or the downstream said the effect
	// did not happen: the attempt runs.
	runAttempt settle = iota
	// recordOutcome: the outcome is decided without an attempt (a found
	// lookup, a failed lookup, a hold); record it.
	recordOutcome
	// giveUp: the lookup was cut short (shutdown, a lost lease) or its
	// audit row was refused because the lease is gone; nothing to record.
	giveUp
)

// beforeAttempt applies the tool's on_unknown to claimed call c. With
// recordOutcome, out is the outcome to record and unsettled says that it
// leaves the earlier attempt's outcome unknown (store.Completion.Unsettled).
func (e *Executor) beforeAttempt(ctx context.Context, c store.Call, log *slog.Logger) (s settle, out tool.Outcome, unsettled bool) {
	if c.Unknown == "" || c.CancelRequested {
		return runAttempt, tool.Outcome{}, false
	}
	switch e.policy(c.Tool).OnUnknown {
	case toolreg.OnUnknownHold:
		log.Warn("call held: an earlier attempt's outcome is unknown (on_unknown: hold)", "unknown", c.Unknown)
		return recordOutcome, tool.Outcome{Err: &tool.ToolError{Code: wire.CodeOutcomeUnknown, Unknown: c.Unknown,
			Retryable: false, Message: heldMessage(fmt.Sprintf("the outcome of an earlier attempt is unknown (%s)", c.Unknown))}}, true
	case toolreg.OnUnknownLookup:
		return e.lookup(ctx, c, log)
	}
	return runAttempt, tool.Outcome{}, false
}

// lookup asks the downstream whether c's effect happened and audits the
// verdict (store.RecordLookup) before acting on it.
func (e *Executor) lookup(ctx context.Context, c store.Call, log *slog.Logger) (settle, tool.Outcome, bool) {
	ans, err := e.lookupFn(ctx, tool.Invocation{CallID: c.CallID, Tool: c.Tool, Attempt: c.Attempt, Log: log})
	if err != nil {
		if ctx.Err() != nil {
			return giveUp, tool.Outcome{}, false
		}
		// The registry could not ask (the tool has no lookup any more):
		// a failed lookup, never an attempt.
		ans = tool.LookupAnswer{Verdict: tool.LookupFailed, Detail: "the lookup could not be made: " + err.Error()}
	}
	event := map[tool.LookupVerdict]string{tool.LookupFound: store.EventLookupFound,
		tool.LookupNotFound: store.EventLookupNotFound}[ans.Verdict]
	if event == "" {
		event = store.EventLookupFailed
	}
	l := store.Lease{CallID: c.CallID, Owner: e.owner, Attempt: c.Attempt}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitTimeout)
	err = e.st.RecordLookup(rctx, l, event, store.DetailLookup(l, ans.Detail))
	cancel()
	switch {
	case errors.Is(err, store.ErrNotHeld):
		log.Warn("lookup answered, but the lease is lost; another attempt has the call", logkey.Err, err)
		return giveUp, tool.Outcome{}, false
	case err != nil:
		// The verdict stands; only its audit row is missing.
		log.Error("recording the lookup's verdict failed", "event", event, logkey.Err, err)
	}
	log.Info("lookup before a new attempt", "event", event, "answer", ans.Detail, "unknown", c.Unknown)
	switch ans.Verdict {
	case tool.LookupFound:
		return recordOutcome, capResult(ans.Found, e.maxResult), false
	case tool.LookupNotFound:
		return runAttempt, tool.Outcome{}, false
	}
	return recordOutcome, tool.Outcome{Err: &tool.ToolError{Code: wire.CodeOutcomeUnknown, Unknown: c.Unknown,
		Retryable: true, Status: ans.Status,
		Message: fmt.Sprintf("the outcome of an earlier attempt is unknown (%s) and the lookup failed: %s; no new attempt was sent",
			c.Unknown, ans.Detail)}}, true
}

// holdUnknown makes an attempt's own outcome_unknown failure final for a
// tool with on_unknown: hold: not retryable, so neither a server-side
// retry nor a same-key request sends it again. Other outcomes pass.
func (e *Executor) holdUnknown(c store.Call, out tool.Outcome) tool.Outcome {
	if out.Err == nil || out.Err.Code != wire.CodeOutcomeUnknown || e.policy(c.Tool).OnUnknown != toolreg.OnUnknownHold {
		return out
	}
	held := *out.Err
	held.Retryable, held.RetryAfter = false, 0
	held.Message = heldMessage(held.Message)
	return tool.Outcome{Err: &held}
}

// heldMessage is the message of a held call's error.
func heldMessage(why string) string {
	return why + "; held by on_unknown: hold until an operator settles it (idemctl resolve)"
}
