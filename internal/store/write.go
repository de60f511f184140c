package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/idemctl/idemctl/internal/failpoint"
)

// Write names one write method of Store. It is the one list of the
// writes: SQLite's write transactions, the failpoints of each write
// (docs/failpoints.md, "Points") and the server's write health are named
// by it, and Observe's test fails when a write method of Store is missing
// from it.
type Write int

// The writes, one per write method of Store.
const (
	WriteCreate          Write = iota // CreateOrGet: a new call, a retry reset, an alias
	WriteClaim                        // ClaimNext
	WriteLease                        // ExtendLease: a worker's heartbeat
	WriteSucceed                      // Succeed: the success and its effect row
	WriteFail                         // Fail: a final failure
	WriteRetry                        // ScheduleRetry: a server-side retry back to pending
	WriteRecover                      // RecoverExpired: expired leases back to pending
	WriteRelease                      // Release: a dead owner's call back to pending
	WriteCancel                       // Cancel: a pending call failed, or a running one asked to stop
	WritePurge                        // Purge: the retention's delete
	WritePurgeTombstones              // PurgeTombstones: the tombstones' retention
	WriteRedrive                      // Redrive: a failed call sent back to pending
	WriteLookup                       // RecordLookup: a lookup's verdict audited
	WriteResolve                      // Resolve: an operator settles an outcome_unknown call
	WriteAdmit                        // Admit: a gate's tokens or probe taken
	WriteUnadmit                      // Unadmit: unused tokens or probe given back
	WriteReport                       // ReportAttempt: an attempt's outcome counted by a breaker
	WriteDeliveryClaim                // ClaimDeliveries: webhook deliveries claimed for sending
	WriteDeliveryEnd                  // EndDelivery: one webhook delivery attempt recorded

	// NumWrites is how many writes there are (for arrays indexed by Write).
	NumWrites
)

// Writes lists every write, in the order above.
var Writes = func() []Write {
	out := make([]Write, NumWrites)
	for i := range out {
		out[i] = Write(i)
	}
	return out
}()

var writeNames = [NumWrites]string{"create", "claim", "lease", "succeed", "fail", "retry", "recover", "release", "cancel", "purge", "purge-tombstones", "redrive", "lookup", "resolve", "admit", "unadmit", "report", "delivery-claim", "delivery-end"}

// String is the write's name, as its failpoints, errors and logs spell it.
func (w Write) String() string {
	if w < 0 || w >= NumWrites {
		return fmt.Sprintf("write(%d)", int(w))
	}
	return writeNames[w]
}

// hasFailpoints reports whether w has failpoints. Purge has none: it
// deletes final calls only, whose loss or survival no invariant of the
// lifecycle depends on, so the crash-point matrix has nothing to check
// there. Nor has PurgeTombstones, for the same reason (its tombstones
// are past their retention). Nor has Redrive: an operator's one reset of
// a final call, which a crash on either side of the commit leaves failed
// or pending, both states the lifecycle already recovers from; the
// matrix's load never reaches it. Nor has Resolve, for the same reason.
// Nor have the webhook deliveries' writes: a crash on either side of their
// commit leaves a delivery pending (sent again, the receiver deduplicates
// by its id) or ended, and the matrix's load names no notify_url.
// Nor has RecordLookup: it adds an audit row to a running attempt, and a
// crash on either side of its commit leaves that attempt running, which a
// recovery marks abandoned, so the next claim asks again.
func (w Write) hasFailpoints() bool {
	return w != WritePurge && w != WritePurgeTombstones && w != WriteRedrive && w != WriteResolve && w != WriteLookup && !w.gate() &&
		w != WriteDeliveryClaim && w != WriteDeliveryEnd
}

// BeforeCommit is the name of w's before-commit failpoint: inside the
// write's transaction, after its statements ran and before COMMIT; it is
// reached only when the write changed at least one row (a crash there
// leaves an uncommitted transaction for the database to roll back).
func (w Write) BeforeCommit() failpoint.Name { return failpoint.Name(w.String() + "/before-commit") }

// AfterCommit is the name of w's after-commit failpoint: after the commit,
// before the caller learns the outcome; it is reached only when the write
// committed a change (Observe).
func (w Write) AfterCommit() failpoint.Name { return failpoint.Name(w.String() + "/after-commit") }

// Failpoints lists every failpoint of the writes, before and after the
// commit of each, in Writes order: what failpoint.Parse accepts.
func Failpoints() []failpoint.Name {
	var out []failpoint.Name
	for _, w := range Writes {
		if w.hasFailpoints() {
			out = append(out, w.BeforeCommit(), w.AfterCommit())
		}
	}
	return out
}

// FailpointHook is the hook that runs r's point of a write (when is
// Write.BeforeCommit or Write.AfterCommit): Options.BeforeCommit and
// Hooks.AfterCommit. An injected error is reported as ErrUnavailable, so
// the server treats it as the database failing the write: 503 to a
// request, logged and retried by a worker. A nil r gives a nil hook.
func FailpointHook(r *failpoint.Registry, when func(Write) failpoint.Name) func(Write) error {
	if r == nil {
		return nil
	}
	return func(w Write) error {
		if !w.hasFailpoints() {
			return nil
		}
		if err := r.Eval(when(w)); err != nil {
			return fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		return nil
	}
}

// Hooks observe a store's writes (Observe). Either may be nil.
type Hooks struct {
	// AfterCommit runs after a write committed a change: a create that
	// only read an existing call, a claim or recovery of nothing, a cancel
	// of a final call, a fenced or refused completion do not reach it. An
	// error replaces the write's answer: the change is durable and the
	// caller is told it failed, the ambiguous outcome a lost connection
	// gives (SQLite's group commit included: the writer learns its batch
	// committed, then the hook runs in the writer's goroutine).
	AfterCommit func(w Write) error
	// Done learns every write's outcome, after AfterCommit: the server's
	// write health (/readyz).
	Done func(w Write, err error)
}

// Observe returns st with h around every write method. It is the one
// decorator of the writes: both hooks sit above the store seam because
// their rule is the same on every backend (a write that returned without
// error has committed). Reads pass through.
func Observe(st Store, h Hooks) Store { return &observed{Store: st, h: h} }

type observed struct {
	Store
	h Hooks
}

// end runs the hooks of a write that returned err, and changed reports
// whether it committed a change; it returns the write's answer.
func (o *observed) end(w Write, changed bool, err error) error {
	if err == nil && changed && o.h.AfterCommit != nil {
		err = o.h.AfterCommit(w)
	}
	if o.h.Done != nil {
		o.h.Done(w, err)
	}
	return err
}

func (o *observed) CreateOrGet(ctx context.Context, n NewCall) (Call, Outcome, error) {
	c, out, err := o.Store.CreateOrGet(ctx, n)
	if err := o.end(WriteCreate, out != Existing, err); err != nil {
		return Call{}, 0, err
	}
	return c, out, nil
}

func (o *observed) ClaimNext(ctx context.Context, owner string, lease time.Duration, limit int, quotas ...ToolQuota) ([]Call, error) {
	calls, err := o.Store.ClaimNext(ctx, owner, lease, limit, quotas...)
	if err := o.end(WriteClaim, len(calls) > 0, err); err != nil {
		return nil, err
	}
	return calls, nil
}

func (o *observed) ExtendLease(ctx context.Context, l Lease, lease time.Duration) error {
	err := o.Store.ExtendLease(ctx, l, lease)
	if errors.Is(err, ErrCancelRequested) {
		// Extended too, with news for the worker.
		if herr := o.end(WriteLease, true, nil); herr != nil {
			return herr
		}
		return err
	}
	return o.end(WriteLease, true, err)
}

func (o *observed) Succeed(ctx context.Context, c Completion) (Call, error) {
	call, err := o.Store.Succeed(ctx, c)
	return o.completion(WriteSucceed, call, err)
}

func (o *observed) Fail(ctx context.Context, c Completion) (Call, error) {
	call, err := o.Store.Fail(ctx, c)
	return o.completion(WriteFail, call, err)
}

func (o *observed) ScheduleRetry(ctx context.Context, c Completion, delay time.Duration) (Call, error) {
	call, err := o.Store.ScheduleRetry(ctx, c, delay)
	return o.completion(WriteRetry, call, err)
}

func (o *observed) completion(w Write, c Call, err error) (Call, error) {
	if err := o.end(w, true, err); err != nil {
		return Call{}, err
	}
	return c, nil
}

func (o *observed) RecoverExpired(ctx context.Context) ([]string, error) {
	ids, err := o.Store.RecoverExpired(ctx)
	if err := o.end(WriteRecover, len(ids) > 0, err); err != nil {
		return nil, err
	}
	return ids, nil
}

func (o *observed) Release(ctx context.Context, l Lease, reason string) error {
	return o.end(WriteRelease, true, o.Store.Release(ctx, l, reason))
}

func (o *observed) Cancel(ctx context.Context, callID string, errJSON json.RawMessage, notify *NewDelivery) (Call, CancelOutcome, error) {
	c, out, err := o.Store.Cancel(ctx, callID, errJSON, notify)
	if err := o.end(WriteCancel, out != AlreadyFinal, err); err != nil {
		return Call{}, 0, err
	}
	return c, out, nil
}

func (o *observed) Redrive(ctx context.Context, callID, by string, prevErr json.RawMessage) (Call, bool, error) {
	c, ok, err := o.Store.Redrive(ctx, callID, by, prevErr)
	if err := o.end(WriteRedrive, ok, err); err != nil {
		return Call{}, false, err
	}
	return c, ok, nil
}

func (o *observed) RecordLookup(ctx context.Context, l Lease, event, detail string) error {
	return o.end(WriteLookup, true, o.Store.RecordLookup(ctx, l, event, detail))
}

func (o *observed) Resolve(ctx context.Context, r Resolution) (Call, bool, error) {
	c, ok, err := o.Store.Resolve(ctx, r)
	if err := o.end(WriteResolve, ok, err); err != nil {
		return Call{}, false, err
	}
	return c, ok, nil
}

func (o *observed) Purge(ctx context.Context, olderThan time.Duration, limit int, tombstones bool) (int, error) {
	n, err := o.Store.Purge(ctx, olderThan, limit, tombstones)
	if err := o.end(WritePurge, n > 0, err); err != nil {
		return 0, err
	}
	return n, nil
}

func (o *observed) PurgeTombstones(ctx context.Context, olderThan time.Duration, limit int) (int, error) {
	n, err := o.Store.PurgeTombstones(ctx, olderThan, limit)
	if err := o.end(WritePurgeTombstones, n > 0, err); err != nil {
		return 0, err
	}
	return n, nil
}

// gate reports whether w is one of the gates' writes (gate.go), which have
// no failpoints: they guard the downstream and decide nothing about a
// call's state.
func (w Write) gate() bool { return w == WriteAdmit || w == WriteUnadmit || w == WriteReport }

func (o *observed) Admit(ctx context.Context, g Gate, want int) (Admission, error) {
	a, err := o.Store.Admit(ctx, g, want)
	if err := o.end(WriteAdmit, true, err); err != nil {
		return Admission{}, err
	}
	return a, nil
}

func (o *observed) Unadmit(ctx context.Context, g Gate, unused int, probe bool) error {
	return o.end(WriteUnadmit, true, o.Store.Unadmit(ctx, g, unused, probe))
}

func (o *observed) ReportAttempt(ctx context.Context, g Gate, out GateOutcome) (GateState, error) {
	s, err := o.Store.ReportAttempt(ctx, g, out)
	if err := o.end(WriteReport, true, err); err != nil {
		return GateState{}, err
	}
	return s, nil
}

func (o *observed) ClaimDeliveries(ctx context.Context, owner string, lease time.Duration, limit int) ([]Delivery, error) {
	ds, err := o.Store.ClaimDeliveries(ctx, owner, lease, limit)
	if err := o.end(WriteDeliveryClaim, len(ds) > 0, err); err != nil {
		return nil, err
	}
	return ds, nil
}

func (o *observed) EndDelivery(ctx context.Context, e DeliveryEnd) error {
	return o.end(WriteDeliveryEnd, true, o.Store.EndDelivery(ctx, e))
}
