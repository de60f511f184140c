package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/idemctl/idemctl/internal/wire"
)

// The rules both backends apply alike live here, decided once above the
// drivers: the audit detail of every event, whether a failure is
// retryable, what an effect must look like, what an empty error is
// stored as. A backend calls these and stores what they return; storetest
// checks the stored result on every backend.
//
// The audit detail of each event (docs/lifecycle.md, "Audit events"):
//
//	created      the tool                               DetailCreated
//	             or, claimed at creation, "tool; claimed  DetailCreatedClaimed
//	             at creation by OWNER (attempt 1)"
//	claimed      the owner                              DetailClaimed
//	succeeded    the effect id, or "no effect"          DetailSucceeded
//	failed       "code: message" of the error           DetailFailed
//	retry_reset  "after " + the failure it resets       DetailRetryReset
//	retry_scheduled  "in D after code: message" (D the  DetailRetryScheduled
//	             backoff, e.g. "in 200ms after ...")
//	recover      "lease expired (owner O, attempt N)"   DetailLeaseExpired
//	             or Release's reason, as given
//	fenced       "owner O attempt N refused: call is    DetailFenced
//	             <status> under owner P attempt M" (or "at attempt M")
//
// succeeded, failed and fenced end with "; lease extended N time(s)" when
// the worker's heartbeats extended the attempt's lease (DetailExtensions):
// heartbeats write no audit row of their own.
//	canceled     "code: message" of the error stored    DetailCanceled
//	cancel_requested  "owner O attempt N"               DetailCancelRequested
//	outcome_unknown  "case: message" of an outcome_unknown  DetailOutcomeUnknown
//	             error (before its failed or retry_scheduled), or
//	             "abandoned: attempt N in flight, <why>"  DetailAbandoned
//	             (before the recover of a running call, or the claim
//	             that takes an expired lease over: DetailTakenOver)
//	lookup_found, lookup_not_found, lookup_failed   DetailLookup
//	             "attempt N: <what the downstream answered>"
//	resolved     "by P as succeeded|failed after code: message"  DetailResolved

// DetailCreated is the created event's detail: the tool.
func DetailCreated(tool string) string { return tool }

// DetailClaimed is the claimed event's detail: the new owner.
func DetailClaimed(owner string) string { return owner }

// claimedAtCreation joins the tool and the owner in the detail of a call
// claimed by its create (NewCall.Claim). One audit row then tells both
// transitions, pending → running included, so a call claimed at creation
// writes one audit row fewer than a call the scheduler claims; ClaimOf
// reads the claim back out of it. Neither a tool name (toolreg's name
// pattern) nor an owner (visible ASCII, no spaces) can contain it.
const (
	claimedAtCreation = "; claimed at creation by "
	firstAttempt      = " (attempt 1)"
)

// DetailCreatedClaimed is the created event's detail of a call claimed
// at creation: "charge; claimed at creation by OWNER (attempt 1)".
func DetailCreatedClaimed(tool, owner string) string {
	return DetailCreated(tool) + claimedAtCreation + owner + firstAttempt
}

// ClaimOf answers whether the audit row ev records a claim of its call,
// and by whom: a claimed row (its detail is the owner), or a created row
// of a call claimed at creation (DetailCreatedClaimed). Every reader that
// counts or looks for claims (the console's timeline, the fault
// scenarios, tests) asks this, so both shapes count alike.
func ClaimOf(ev AuditEvent) (owner string, ok bool) {
	switch ev.Event {
	case EventClaimed:
		return ev.Detail, true
	case EventCreated:
		i := strings.Index(ev.Detail, claimedAtCreation)
		if i < 0 || !strings.HasSuffix(ev.Detail, firstAttempt) {
			return "", false
		}
		return strings.TrimSuffix(ev.Detail[i+len(claimedAtCreation):], firstAttempt), true
	}
	return "", false
}

// CreatedTool is the tool a created row names (its detail without the
// claim of DetailCreatedClaimed); "" for any other event.
func CreatedTool(ev AuditEvent) string {
	if ev.Event != EventCreated {
		return ""
	}
	if i := strings.Index(ev.Detail, claimedAtCreation); i >= 0 {
		return ev.Detail[:i]
	}
	return ev.Detail
}

// DetailSucceeded is the succeeded event's detail: the effect id the call
// points at, or "no effect", then c's lease extensions (DetailExtensions).
func DetailSucceeded(effectID *string, c Completion) string {
	if effectID == nil {
		return "no effect" + DetailExtensions(c.Extensions)
	}
	return *effectID + DetailExtensions(c.Extensions)
}

// DetailFailed is the failed event's detail: the summary of the error
// stored (FailureJSON(c)), then c's lease extensions.
func DetailFailed(c Completion) string {
	return ErrorSummary(FailureJSON(c)) + DetailExtensions(c.Extensions)
}

// DetailExtensions is the suffix a completion's detail gets for the
// heartbeats of its attempt: "; lease extended 1 time", "; lease extended
// 3 times", or "" for none (so a short tool's detail is unchanged).
func DetailExtensions(n int64) string {
	switch {
	case n <= 0:
		return ""
	case n == 1:
		return "; lease extended 1 time"
	}
	return fmt.Sprintf("; lease extended %d times", n)
}

// DetailCanceled is the canceled event's detail: the summary of the
// canceled error stored. A pending call has no attempt and no extensions.
func DetailCanceled(errJSON json.RawMessage) string { return ErrorSummary(errJSON) }

// DetailCancelRequested is the cancel_requested event's detail: who runs
// the call that is asked to stop.
func DetailCancelRequested(l Lease) string {
	return fmt.Sprintf("owner %s attempt %d", l.Owner, l.Attempt)
}

// DetailRetryScheduled is the retry_scheduled event's detail: the delay
// before the call may be claimed again and the summary of the failure that
// is retried ("in 1.5s after downstream_error: 503"), then c's lease
// extensions.
func DetailRetryScheduled(delay time.Duration, c Completion) string {
	return "in " + delay.String() + " after " + ErrorSummary(FailureJSON(c)) + DetailExtensions(c.Extensions)
}

// DetailRetryReset is the retry_reset event's detail: the failure reset.
func DetailRetryReset(prevErr json.RawMessage) string { return "after " + ErrorSummary(prevErr) }

// DetailLeaseExpired is the recover event's detail when RecoverExpired
// returns a call: the lease that lapsed (owner "" for a call that had
// none).
func DetailLeaseExpired(l Lease) string {
	return leaseExpired(l.Owner, fmt.Sprint(l.Attempt))
}

func leaseExpired(owner, attempt string) string {
	return "lease expired (owner " + owner + ", attempt " + attempt + ")"
}

// DetailFenced is the fenced event's detail: the refused lease and where
// the call stands now (cur, read after the refusal).
func DetailFenced(refused Completion, cur Call) string {
	now := string(cur.Status)
	if cur.Owner != nil {
		now += fmt.Sprintf(" under owner %s attempt %d", *cur.Owner, cur.Attempt)
	} else {
		now += fmt.Sprintf(" at attempt %d", cur.Attempt)
	}
	return fmt.Sprintf("owner %s attempt %d refused: call is %s", refused.Owner, refused.Attempt, now) +
		DetailExtensions(refused.Extensions)
}

// DetailOutcomeUnknown is the outcome_unknown event's detail for a
// completion whose error has code outcome_unknown: "case: message"
// ("timeout_after_send: the request was sent, then ..."). ok is false for
// any other completion, which gets no such event.
func DetailOutcomeUnknown(c Completion) (detail string, ok bool) {
	var e wire.CallError
	if c.Unsettled || len(c.Error) == 0 || json.Unmarshal(c.Error, &e) != nil || e.Code != wire.CodeOutcomeUnknown {
		return "", false
	}
	return e.Unknown + ": " + e.Message, true
}

// DetailAbandoned is the outcome_unknown event's detail when a running
// call is recovered (RecoverExpired, Release): its attempt was abandoned
// in flight, and whatever the tool had sent may have been acted on. why is
// how it was lost: the recover event's own detail.
func DetailAbandoned(l Lease, why string) string {
	return abandonedDetail(fmt.Sprint(l.Attempt), why)
}

func abandonedDetail(attempt, why string) string {
	return wire.UnknownAbandoned + ": attempt " + attempt + " in flight, " + why
}

// DetailTakenOver is the outcome_unknown event's detail when ClaimNext
// takes a running call whose lease expired directly, without a recovery
// pass between: DetailAbandoned of the lapsed lease, with the lease-expired
// reason. TakenOverFormat is the same wording as a PostgreSQL format()
// template (%1$s the old attempt, %2$s the old owner), so a backend that
// builds the row in SQL words it identically.
func DetailTakenOver(l Lease) string { return DetailAbandoned(l, DetailLeaseExpired(l)) }

// TakenOverFormat: see DetailTakenOver.
var TakenOverFormat = abandonedDetail("%1$s", leaseExpired("%2$s", "%1$s"))

// ErrorSummary renders a call's error object {"code","message",...} as the
// short text of audit details ("code: message"). Anything that is not such
// an object is shown raw, cut at 200 bytes.
func ErrorSummary(errJSON json.RawMessage) string {
	var e struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	if json.Unmarshal(errJSON, &e) != nil || (e.Code == "" && e.Message == "") {
		const max = 200
		if len(errJSON) > max {
			return string(errJSON[:max]) + "…"
		}
		return string(errJSON)
	}
	if e.Message == "" {
		return e.Code
	}
	return e.Code + ": " + e.Message
}

// Retryable reports whether a stored error object says "retryable": true,
// the only thing that makes a failed call resettable by a same-key request.
// Anything else (false, missing, not a boolean, unparsable) is final.
func Retryable(errJSON json.RawMessage) bool {
	var e struct {
		Retryable *bool `json:"retryable"`
	}
	return json.Unmarshal(errJSON, &e) == nil && e.Retryable != nil && *e.Retryable
}

// Redrivable reports whether a failed call whose stored error is errJSON
// may be redriven (docs/operations.md, "Redrive"): a retryable failure
// always; a definite one (retryable false, missing or unparsable) only
// with force; an outcome_unknown one never, force or not: its effect may
// have happened, so only a same-key retry or an operator settles it.
func Redrivable(errJSON json.RawMessage, force bool) bool {
	if ErrorCode(errJSON) == wire.CodeOutcomeUnknown {
		return false
	}
	return force || Retryable(errJSON)
}

// ErrorCode is the "code" of a stored error object, "" if it has none.
func ErrorCode(errJSON json.RawMessage) string {
	var e struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal(errJSON, &e) // unparsable: no code
	return e.Code
}

// DetailRedriven is the redriven event's detail: who redrove the call and
// the failure it left (principal "" is shown as "-", a server without
// auth).
func DetailRedriven(by string, prevErr json.RawMessage) string {
	if by == DefaultPrincipal {
		by = "-"
	}
	return "by " + by + " after " + ErrorSummary(prevErr)
}

// FailureJSON is the error object Fail stores for c: c.Error, or {} when
// the worker gave none.
func FailureJSON(c Completion) json.RawMessage {
	if len(c.Error) == 0 {
		return json.RawMessage(`{}`)
	}
	return c.Error
}

// Errors of CheckEffect.
var (
	errEffectNoID      = errors.New("effect without an effect id")
	errEffectOtherCall = errors.New("effect belongs to another call")
)

// CheckEffect checks a success's effect before anything is written: it
// must have an id, and if it names a call, the completion's own. No effect
// is fine.
func CheckEffect(c Completion) error {
	e := c.Effect
	switch {
	case e == nil:
		return nil
	case e.EffectID == "":
		return fmt.Errorf("succeed %s: %w", c.CallID, errEffectNoID)
	case e.CallID != "" && e.CallID != c.CallID:
		return fmt.Errorf("succeed %s: %w %s", c.CallID, errEffectOtherCall, e.CallID)
	}
	return nil
}

// UnknownAfter is the call's Unknown once completion c committed (Fail,
// ScheduleRetry): kept as it is for an unsettled completion (keep true),
// the case of an outcome_unknown error, and "" (settled) for any other
// outcome. Succeed and Resolve always settle it; a recovery or takeover of
// a running call sets wire.UnknownAbandoned.
func UnknownAfter(c Completion) (unknown string, keep bool) {
	if c.Unsettled {
		return "", true
	}
	var e wire.CallError
	if json.Unmarshal(c.Error, &e) != nil || e.Code != wire.CodeOutcomeUnknown {
		return "", false
	}
	if e.Unknown == "" {
		// An outcome_unknown error that names no case still leaves the
		// outcome unknown.
		return wire.UnknownAbandoned, false
	}
	return e.Unknown, false
}

// DetailLookup is the detail of a lookup event: the attempt that asked
// and what the downstream answered ("attempt 2: answered 404").
func DetailLookup(l Lease, answer string) string {
	return fmt.Sprintf("attempt %d: %s", l.Attempt, answer)
}

// CheckLookupEvent refuses an event RecordLookup does not write.
func CheckLookupEvent(event string) error {
	for _, e := range LookupEvents {
		if e == event {
			return nil
		}
	}
	return fmt.Errorf("not a lookup event: %q", event)
}

// Resolvable reports whether c may be resolved (Store.Resolve): a failed
// call whose error is outcome_unknown, whatever its retryable flag. Every
// other call, final or not, keeps its state: an operator settles only
// what idemctl could not know.
func Resolvable(c Call) bool {
	return c.Status == StatusFailed && ErrorCode(c.ErrorJSON) == wire.CodeOutcomeUnknown
}

// DetailResolved is the resolved event's detail: who settled the call
// ("-" without authentication), how, and the failure it left.
func DetailResolved(r Resolution) string {
	by := r.By
	if by == DefaultPrincipal {
		by = "-"
	}
	as := "failed"
	if r.Succeeded {
		as = "succeeded"
	}
	return "by " + by + " as " + as + " after " + ErrorSummary(r.PrevErr)
}
