package executor

import (
	"context"
	"errors"
	"time"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/tool"
	"github.com/idemctl/idemctl/internal/wire"
)

// commit records the outcome under the claim's fencing token. A transient
// failure is retried a few times: the lease is still ours, and a retry after
// an ambiguous failure is safe (fenced on owner and attempt; the effect is
// unique per call). extensions is the attempt's heartbeat count, for the
// audit detail.
//
// A retryable failure of an attempt below the tool's MaxAttempts is not
// recorded as failed: ScheduleRetry puts the call back to pending until
// now + retryDelay (docs/lifecycle.md, "Server-side retries"); the call
// returned is then pending. unsettled: the outcome was decided without an
// attempt and leaves an earlier one's unknown outcome as it is
// (store.Completion.Unsettled).
func (e *Executor) commit(c store.Call, out tool.Outcome, unsettled bool, extensions int64) (store.Call, error) {
	comp := store.Completion{Lease: store.Lease{CallID: c.CallID, Owner: e.owner, Attempt: c.Attempt}, Extensions: extensions,
		Unsettled: unsettled}
	notify, nerr := store.DeliveryFor(c)
	if nerr != nil {
		return store.Call{}, nerr
	}
	comp.Notify = notify
	if out.Err != nil {
		raw, err := storedError(out.Err)
		if err != nil {
			return store.Call{}, err
		}
		comp.Error = raw
	} else {
		comp.Result, comp.Effect = out.Result, out.Effect
	}
	var (
		done  store.Call
		err   error
		delay time.Duration
	)
	retry := out.Err != nil && out.Err.Retryable && c.Attempt < int64(e.policy(c.Tool).MaxAttempts)
	if retry {
		// Decided once, before the commit loop: a repeated commit after an
		// ambiguous failure asks for the same delay.
		delay = retryDelay(e.policy(c.Tool), c.Attempt, out.Err.RetryAfter)
	}
	for try := 0; try < 3; try++ {
		if try > 0 {
			time.Sleep(time.Duration(100<<try) * time.Millisecond)
		}
		ctx, cancel := context.WithTimeout(context.Background(), commitTimeout)
		if retry {
			done, err = e.st.ScheduleRetry(ctx, comp, delay)
		} else if out.Err != nil {
			done, err = e.st.Fail(ctx, comp)
		} else {
			done, err = e.st.Succeed(ctx, comp)
		}
		cancel()
		// Only a transient failure is worth another try: a refusal of
		// this completion (refusedForGood) gets the same answer every
		// time, and execute records it as a failure instead.
		if err == nil || !transientErr(err) {
			return done, err
		}
	}
	return done, err
}

// transientErr reports whether a store error says "not now" rather than
// "not this": the database is unreachable or busy, or the commit ran out of
// time. The same completion may well commit on a retry.
func transientErr(err error) bool {
	return errors.Is(err, store.ErrUnavailable) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}

// refusedForGood reports whether a completion error is the database
// refusing this completion itself (a value it cannot store, a constraint):
// the backend says so with store.ErrRefused, as opposed to a lost lease
// (ErrFenced), a database that cannot write at the moment (ErrUnavailable,
// ErrReadOnly), a call that is gone (ErrNotFound) or an error nobody
// classified, which the lease retries. Such a refusal is deterministic: the
// same completion would be refused on every attempt, so retrying the call
// under a new lease never ends.
func refusedForGood(err error) bool {
	return errors.Is(err, store.ErrRefused)
}

// failRefused records, once and under the same fencing token, that the
// outcome of attempt c could not be recorded: the call fails with code
// internal and retryable false. Every accepted call must reach a final
// state without the client's help (docs/lifecycle.md, "Invariants"); a
// call whose completion the database refuses for good would otherwise be
// re-run once per lease, for ever.
//
// Why failing is consistent even for tools with an effect (charge,
// send_email): in this service the effect row is written only by the
// Succeed transaction, and that transaction was refused and rolled back,
// so no effect exists and "failed" tells the truth about the effects
// table. retryable is false because a same-key retry would run into the
// same refusal. The error object is fixed text plus a short reason built
// from the error's class, never from its message: a database message can
// quote the value it refused, and that is user data.
//
// If this write fails too (ErrFenced included), nothing more is tried
// here: the lease brings the call back, as for any failed completion.
func (e *Executor) failRefused(c store.Call, refusal error, extensions int64) (store.Call, error) {
	raw, err := storedError(&tool.ToolError{
		Code:      wire.CodeInternal,
		Message:   "could not record the tool's outcome: " + refusalReason(refusal),
		Retryable: false,
	})
	if err != nil {
		return store.Call{}, err
	}
	notify, err := store.DeliveryFor(c)
	if err != nil {
		return store.Call{}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), commitTimeout)
	defer cancel()
	return e.st.Fail(ctx, store.Completion{Lease: store.Lease{CallID: c.CallID, Owner: e.owner, Attempt: c.Attempt},
		Error: raw, Extensions: extensions, Notify: notify})
}

// refusalReason is the short, data-free reason of a refused completion:
// "the database refused it", with the refusal's code when the backend gives
// one (store.RefusedError.Code: an SQLSTATE such as 22P05 untranslatable
// character, or an SQLite result code; it names the class of problem and
// never the value).
func refusalReason(err error) string {
	const reason = "the database refused it"
	var refused *store.RefusedError
	if errors.As(err, &refused) && refused.Code != "" {
		return reason + " (" + refused.Code + ")"
	}
	return reason
}
