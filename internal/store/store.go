// Package store is the storage seam of idemctl: the interface the server,
// inspect and bench need, the types that cross it, the sentinel errors every
// backend translates its own errors into (errors.go), and the rules both
// backends apply the same way — audit wording, the retryable flag, the
// effect checks (detail.go). Backends decide nothing of these themselves:
// they store what they are given (as river builds its params above
// riverdriver).
//
// Backends live in subpackages (store/sqlite, store/postgres) and are chosen
// from the DSN by store/backend. Every backend must pass the shared suite in
// store/storetest, so each invariant of the lifecycle (docs/lifecycle.md,
// "Invariants") is tested once and run on all.
//
// Times are Unix seconds as float64 (REAL in SQLite, double precision in
// PostgreSQL). Lease deadlines are always computed from the database's own
// clock inside the backend; the caller passes a duration, never a
// timestamp, so clock skew between several server instances cannot make
// one of them take over a live lease.
//
// That clock is a wall clock (SQLite: the host's; PostgreSQL: the server's
// clock_timestamp()), not a monotonic one: the deadline is stored in the
// database and must mean the same to every process and after a restart, so
// no process-local monotonic base can express it. A forward step of that
// clock longer than the lease therefore makes live leases look expired: the
// call is recovered or claimed again and runs a second time, and the first
// worker's late completion is fenced (its effect never lands; the unique
// effects.call_id stays the last gate). A backward step only makes leases
// last longer. Run the database host with a slewing time daemon, not one
// that steps the clock (docs/operations.md, "Reliability notes").
package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/idemctl/idemctl/internal/wire"
)

// Status is the state of a call (docs/lifecycle.md, "States"): pending →
// running → succeeded | failed. The values are the API's (wire.Status):
// the database stores what the API shows.
type Status = wire.Status

// The four states of a call. succeeded and failed are final, except that a
// same-key request resets a retryable failure to pending.
const (
	StatusPending   = wire.StatusPending
	StatusRunning   = wire.StatusRunning
	StatusSucceeded = wire.StatusSucceeded
	StatusFailed    = wire.StatusFailed
)

// Statuses lists every status in lifecycle order. It is the one list of
// them: handlers, statements, reads, inspect and bench range over it.
var Statuses = wire.Statuses

// The doors a call comes through (Call.Via): the HTTP API and the MCP
// front door share one create-or-get path, and only this tells them apart.
const (
	ViaHTTP = "http"
	ViaMCP  = "mcp"
)

// ViaOf is the door stored for a new call: v, or ViaHTTP when empty.
func ViaOf(v string) string {
	if v == "" {
		return ViaHTTP
	}
	return v
}

// Audit event names (docs/lifecycle.md, "Audit events"). The detail of
// each is decided in detail.go.
const (
	EventCreated    = "created"
	EventClaimed    = "claimed"
	EventSucceeded  = "succeeded"
	EventFailed     = "failed"
	EventRetryReset = "retry_reset"
	// EventRetryScheduled: a retryable failure with attempts left went
	// back to pending with a not-before time (ScheduleRetry).
	EventRetryScheduled = "retry_scheduled"
	EventRecover        = "recover"
	EventFenced         = "fenced"
	// EventCanceled: a pending call was failed by a cancel request.
	EventCanceled = "canceled"
	// EventCancelRequested: a running call was asked to stop.
	EventCancelRequested = "cancel_requested"
	// EventRedriven: a failed call was sent back to pending by a redrive
	// (Store.Redrive); the detail is DetailRedriven.
	EventRedriven = "redriven"
	// EventDeduplicated: a request with a new key was answered with this
	// call by intent deduplication (NewCall.DedupWindow); the detail is
	// the new key, now an alias of the call.
	EventDeduplicated = "deduplicated"
	// EventOutcomeUnknown: an attempt ended without knowing whether the
	// tool's effect happened downstream (docs/lifecycle.md, "Unknown
	// outcomes"); the detail names the case (DetailOutcomeUnknown,
	// DetailAbandoned).
	EventOutcomeUnknown = "outcome_unknown"
	// EventLookupFound, EventLookupNotFound and EventLookupFailed: a tool
	// with on_unknown: lookup asked the downstream whether the effect of
	// an attempt whose outcome is unknown happened (RecordLookup); the
	// detail is DetailLookup.
	EventLookupFound    = "lookup_found"
	EventLookupNotFound = "lookup_not_found"
	EventLookupFailed   = "lookup_failed"
	// EventResolved: an operator settled a failed outcome_unknown call
	// (Store.Resolve); the detail is DetailResolved.
	EventResolved = "resolved"
)

// LookupEvents are the events RecordLookup writes.
var LookupEvents = []string{EventLookupFound, EventLookupNotFound, EventLookupFailed}

// CancelOutcome says what Cancel did.
type CancelOutcome int

// Outcomes of Cancel.
const (
	// Canceled: the call was pending; it is now failed with the given
	// error (audit canceled).
	Canceled CancelOutcome = iota + 1
	// CancelRequested: the call was running; cancel_requested is set
	// (audit cancel_requested, once) and the worker running it is to stop
	// it. The call ends failed canceled unless the tool finished first.
	CancelRequested
	// AlreadyFinal: the call had succeeded or failed; nothing changed.
	AlreadyFinal
)

// DefaultPrincipal is the principal of every call recorded without
// authentication: by a server run without auth tokens, and every call a
// database held before principals existed (the schema migration gives
// those rows this value). A token file cannot name it, so no
// authenticated client can read or replay these calls.
const DefaultPrincipal = ""

// Call is one logical call: one row of the calls table.
type Call struct {
	CallID string
	// Principal is who recorded the call (docs/api.md, "Authentication");
	// idempotency keys are unique per principal, not globally.
	Principal   string
	IdemKey     string
	Fingerprint string
	ClientID    *string
	Seq         *int64
	Tool        string
	ArgsJSON    json.RawMessage // canonical args as stored; never nil
	Status      Status
	ResultJSON  json.RawMessage // nil unless succeeded
	ErrorJSON   json.RawMessage // nil unless failed, or pending after ScheduleRetry (the failure it waits out)
	Attempt     int64
	LeaseUntil  *float64 // nil unless running
	Owner       *string  // nil unless running
	EffectID    *string  // set once succeeded with an effect
	// CancelRequested: a cancel request reached the call while it ran. A
	// worker that claims such a call fails it canceled without running it.
	CancelRequested bool
	// NotBefore is the not-before time of the call's last server-side
	// retry (ScheduleRetry), Unix seconds by the database's clock: while
	// the call is pending, ClaimNext does not take it before then. nil if
	// no retry was scheduled since the call was created or last reset by a
	// same-key request. A claim leaves it as it is (then in the past).
	NotBefore *float64
	// Via is the door the call came through: ViaHTTP or ViaMCP.
	Via string
	// Unknown is the case (wire.Unknown*) of the call's last attempt
	// whose outcome is unknown and not settled since (docs/lifecycle.md,
	// "Unknown outcomes"); "" when there is none. It survives the claims
	// that follow, until an attempt's outcome, a lookup's found answer or
	// an operator settles it (UnknownAfter).
	Unknown string
	// NotifyURL is where the call's final result is delivered (a webhook;
	// NewCall.NotifyURL), nil for none.
	NotifyURL *string
	// TraceParent is the W3C traceparent of the request that created the
	// call, "" if it was not traced: its attempts continue that trace
	// (docs/operations.md, "Traces").
	TraceParent string
	CreatedAt   float64
	UpdatedAt   float64
}

// NewCall is what CreateOrGet records for a key seen for the first time.
// The caller has already validated it; the store does not look inside args.
type NewCall struct {
	CallID      string // "c_" + 16 hex, generated by the caller
	Principal   string // DefaultPrincipal without authentication
	IdemKey     string
	Fingerprint string
	ClientID    *string
	Seq         *int64
	Tool        string
	ArgsJSON    json.RawMessage
	// Via is the door the call comes through (ViaHTTP, ViaMCP); "" is
	// ViaHTTP. Stored, never part of the request's identity.
	Via string
	// NotifyURL, if set, is where each final state of the call is
	// delivered (docs/api.md, "Completion webhooks"): stored with a new
	// call, never part of its identity, and never changed by a later
	// request with the same key. The caller has checked it against the
	// allow-list.
	NotifyURL *string
	// TraceParent is the creating request's W3C traceparent, "" for none.
	// Stored as given, never part of the request's identity.
	TraceParent string
	// Intent is the call's intent fingerprint (the server's hash of the
	// tool and the args its dedup rule selects), stored with the call;
	// "" stores none. The store compares it exactly and never computes it.
	Intent string
	// DedupWindow > 0 (with Intent set) asks for intent deduplication: if
	// the key is new and a call of the same principal, tool and Intent
	// was created within DedupWindow (by the database's clock), no call is
	// created; the key is recorded as an alias of the newest such call
	// and that call is returned (Deduplicated).
	DedupWindow time.Duration
	// TombstoneRetention > 0 makes a key whose call retention purged at
	// most this long ago (by the database's clock) expired rather than
	// new: CreateOrGet answers ErrKeyExpired and records nothing. 0 never
	// consults tombstones (the key is new again, as before tombstones).
	// A tombstone older than this is ignored even before PurgeTombstones
	// deletes it, so the answer never depends on when the sweep ran.
	TombstoneRetention time.Duration
	// Claim, if set, claims the call in the transaction that creates it
	// (docs/lifecycle.md, "Claim at creation"): only when CreateOrGet
	// answers Created, the call is inserted running under Claim.Owner at
	// attempt 1 with its lease ending at the database's now + Claim.Lease,
	// and its one created audit row says so (DetailCreatedClaimed). Any
	// other outcome (a replay, a reset, an alias, a conflict, an expired
	// key) ignores it: nothing is claimed. nil creates a pending call.
	Claim *CreateClaim
}

// CreateClaim is NewCall.Claim: the owner and lease length of a claim
// made by the create itself, as ClaimNext would make it (the lease is
// counted from the database's clock in the backend, like every lease).
type CreateClaim struct {
	Owner string
	Lease time.Duration
}

// CheckCreateClaim is CreateOrGet's check of n.Claim, shared by backends:
// an owner is required and the lease must be positive (a claim that
// expires as it is made would be taken over at once).
func CheckCreateClaim(n NewCall) error {
	switch {
	case n.Claim == nil:
		return nil
	case n.Claim.Owner == "":
		return fmt.Errorf("create %s: claim without an owner", n.IdemKey)
	case n.Claim.Lease <= 0:
		return fmt.Errorf("create %s: claim with a lease of %v, want > 0", n.IdemKey, n.Claim.Lease)
	}
	return nil
}

// DetailCreatedOf is the created audit row's detail for n, claimed or
// not: what every backend writes for a Created call.
func DetailCreatedOf(n NewCall) string {
	if n.Claim != nil {
		return DetailCreatedClaimed(n.Tool, n.Claim.Owner)
	}
	return DetailCreated(n.Tool)
}

// Tombstone is what remains of a purged call's key (docs/operations.md,
// "Retention"): enough to refuse the key with 410 and name the call, and
// nothing of its args or result. A call's own key and each of its alias
// keys (intent deduplication) get one.
type Tombstone struct {
	Principal   string
	IdemKey     string
	Fingerprint string
	CallID      string
	Tool        string
	// PurgedAt is when retention purged the call, Unix seconds by the
	// database's clock.
	PurgedAt float64
}

// Outcome says what CreateOrGet did.
type Outcome int

// Outcomes of CreateOrGet.
const (
	// Created: the key was new; a call was inserted (audit created),
	// pending, or running at attempt 1 when NewCall.Claim asked for it.
	Created Outcome = iota + 1
	// Existing: the key was known with the same fingerprint; nothing changed.
	Existing
	// RetryReset: the key was known, the call had failed with
	// retryable=true; it was reset to pending (audit retry_reset).
	RetryReset
	// Deduplicated: the key was new, and a call of the same principal,
	// tool and intent created within NewCall.DedupWindow was found; the
	// key is now an alias of that call, which is returned unchanged
	// (audit deduplicated, detail = the new key).
	Deduplicated
)

// String names the outcome as the audit and logs do.
func (o Outcome) String() string {
	switch o {
	case Created:
		return "created"
	case Existing:
		return "existing"
	case RetryReset:
		return "retry_reset"
	case Deduplicated:
		return "deduplicated"
	}
	return "unknown"
}

// Effect is the simulated side effect a successful call leaves behind. At
// most one per call: effects.call_id is UNIQUE, the last gate (docs/design.md, "Why effects are unique per call").
type Effect struct {
	EffectID  string
	CallID    string
	Tool      string
	Amount    *int64
	CreatedAt float64 // ignored on write; the store stamps it
}

// Lease is the fencing token of one attempt (docs/design.md): the call,
// the owner that claimed it and the attempt of that claim. Every write a
// worker makes about its attempt (ExtendLease, Release, Succeed, Fail,
// ScheduleRetry) presents it, and commits only if the call is still
// running under exactly that owner and attempt: one WHERE clause in every
// backend. A worker whose lease was recovered or taken over holds a stale
// token, and its writes are refused.
type Lease struct {
	CallID  string
	Owner   string
	Attempt int64
}

// LeaseOf is the lease of c as claimed: its id, owner ("" if none) and
// attempt.
func LeaseOf(c Call) Lease {
	l := Lease{CallID: c.CallID, Attempt: c.Attempt}
	if c.Owner != nil {
		l.Owner = *c.Owner
	}
	return l
}

// String is the token as logs and errors show it.
func (l Lease) String() string {
	return fmt.Sprintf("%s (owner %s, attempt %d)", l.CallID, l.Owner, l.Attempt)
}

// Completion is a worker's report of how an attempt ended, under the
// attempt's Lease: the completion commits only if the call is still
// running under exactly that owner and attempt.
type Completion struct {
	Lease
	// For Succeed: the result and, for tools with a side effect, the effect
	// row written in the same transaction.
	Result json.RawMessage
	Effect *Effect
	// For Fail: the error object {"code","message","retryable"}.
	Error json.RawMessage
	// Extensions is how many times the worker extended this attempt's
	// lease (ExtendLease) before completing. Heartbeats write no audit row
	// of their own; the completion's audit detail (or the fenced row's)
	// mentions the count instead (DetailExtensions).
	Extensions int64
	// Unsettled, for Fail and ScheduleRetry: the attempt did not run the
	// tool because an earlier attempt's outcome is still unknown (a
	// lookup that failed, a call held by on_unknown: hold). The call's
	// Unknown stays as it is, and no outcome_unknown event is written: no
	// new request was sent (UnknownAfter).
	Unsettled bool
	// Notify, for Succeed and Fail of a call with a notify_url, is the
	// webhook delivery written in the completion's transaction (the
	// outbox); nil writes none, and no statement.
	Notify *NewDelivery
}

// Resolution is an operator's settlement of a failed outcome_unknown call
// (Store.Resolve).
type Resolution struct {
	CallID string
	// By is the principal who resolves ("" without authentication).
	By string
	// PrevErr is the error the call was found failed with; the call is
	// settled only if it still has exactly this one.
	PrevErr json.RawMessage
	// Succeeded settles the call as succeeded with Result (and Effect,
	// for a tool with an effect); otherwise as failed with Error.
	Succeeded bool
	Result    json.RawMessage
	Effect    *Effect
	Error     json.RawMessage
	// Notify is the webhook delivery of the settled state, written with it
	// (a resolve makes a new final state); nil for a call without a
	// notify_url.
	Notify *NewDelivery
}

// AuditEvent is one row of the audit table.
type AuditEvent struct {
	ID     int64
	TS     float64
	CallID string
	Event  string
	Detail string
}

// Stats is the /stats view: logical calls against side effects.
type Stats struct {
	Calls    int64
	Effects  int64
	ByStatus map[Status]int64
}

// AttemptBucket is one row of the attempt distribution.
type AttemptBucket struct {
	Attempt int64
	Calls   int64
}

// MaxRateMinutes bounds Store.Rates' window (one day).
const MaxRateMinutes = 24 * 60

// RateBucket is one minute of Store.Rates.
type RateBucket struct {
	// Minute is the bucket's start, Unix seconds (a multiple of 60).
	Minute int64
	// Created counts calls created in the minute.
	Created int64
	// Succeeded and Failed count calls whose last update, in that final
	// state, fell in the minute.
	Succeeded, Failed int64
}

// Rates is Store.Rates' answer: Now is the database's clock when it was
// read, Buckets the minutes from the first of the window to Now's, oldest
// first (after FillRates: every minute, zeros included).
type Rates struct {
	Now     float64
	Buckets []RateBucket
}

// RateWindowStart is the first second Store.Rates counts: the start of
// the minute minutes whole minutes before now's.
func RateWindowStart(now float64, minutes int) int64 {
	return MinuteOf(now) - int64(minutes)*60
}

// MinuteOf is the start of the minute ts falls in, Unix seconds.
func MinuteOf(ts float64) int64 {
	m := int64(ts) / 60 * 60
	if ts < 0 && float64(m) != ts {
		m -= 60
	}
	return m
}

// FillRates completes a backend's sparse buckets into one bucket per
// minute of the window, oldest first; buckets outside it are dropped.
func FillRates(now float64, minutes int, sparse []RateBucket) Rates {
	start := RateWindowStart(now, minutes)
	out := Rates{Now: now, Buckets: make([]RateBucket, minutes+1)}
	for i := range out.Buckets {
		out.Buckets[i].Minute = start + int64(i)*60
	}
	for _, b := range sparse {
		i := (b.Minute - start) / 60
		if b.Minute < start || i >= int64(len(out.Buckets)) || b.Minute%60 != 0 {
			continue
		}
		out.Buckets[i].Created += b.Created
		out.Buckets[i].Succeeded += b.Succeeded
		out.Buckets[i].Failed += b.Failed
	}
	return out
}

// AddRate adds n to b's counter for kind, as backends' Rates statements
// name them: "created", or the final status.
func AddRate(b *RateBucket, kind string, n int64) {
	switch kind {
	case "created":
		b.Created += n
	case string(StatusSucceeded):
		b.Succeeded += n
	case string(StatusFailed):
		b.Failed += n
	}
}

// CheckRateMinutes is Store.Rates' argument check, shared by backends.
func CheckRateMinutes(minutes int) error {
	if minutes < 0 || minutes > MaxRateMinutes {
		return fmt.Errorf("rates: minutes must be 0 to %d, got %d", MaxRateMinutes, minutes)
	}
	return nil
}

// Queue is the pending queue at one instant (/stats, /metrics, and the
// back-pressure of new keys).
type Queue struct {
	// Pending is the number of calls with status pending.
	Pending int64
	// OldestPendingAge is how long ago the oldest pending call was
	// created, by the database's clock (the claim order is by creation
	// too); 0 when nothing is pending. A call reset by a same-key retry
	// counts from its creation, not from its reset.
	OldestPendingAge time.Duration
}

// Dupe is a call that has more than one effect. The schema makes this
// impossible; inspect reports it so an operator can prove it.
type Dupe struct {
	CallID  string
	Effects int64
}

// ListFilter narrows ListCalls. Zero values mean "all".
type ListFilter struct {
	Status Status
	Limit  int
	// Principal, if set, lists only that principal's calls (the API's
	// listing; inspect and the scheduler list everyone's).
	Principal *string
	// Tool, if set, lists only calls of that tool.
	Tool string
	// Code, if set, lists only calls whose error (a failed call's, or
	// the failure a pending call waits out) has that code.
	Code string
	// After, if set, lists only calls after that position in the listing
	// order (keyset pagination): the cursor of the last call of the
	// previous page.
	After *Cursor
	// KeyPrefix, if set, lists only calls whose own idempotency key
	// starts with it (byte for byte, case-sensitive; alias keys of intent
	// deduplication are not searched).
	KeyPrefix string
	// Since and Until, if set, list only calls created at or after Since
	// and before Until (Unix seconds, the database's clock).
	Since, Until *float64
}

// Cursor is a position in ListCalls' order, newest first: created_at
// descending, then call_id descending. Calls created after a listing
// started sort before its first page, so they never shift later pages.
type Cursor struct {
	CreatedAt float64
	CallID    string
}

// CursorOf is the position of c in ListCalls' order.
func CursorOf(c Call) Cursor { return Cursor{CreatedAt: c.CreatedAt, CallID: c.CallID} }

// Keyset reports whether f needs the keyset listing: a principal, a tool
// or a cursor. That listing orders ties by call_id on every backend; the
// plain one (inspect, the scheduler) by insertion.
func (f ListFilter) Keyset() bool {
	return f.Principal != nil || f.Tool != "" || f.Code != "" || f.After != nil || f.KeyPrefix != "" || f.Since != nil || f.Until != nil
}

// ToolQuota caps how many calls of one tool a ClaimNext may claim.
type ToolQuota struct {
	Tool string
	// Max is the most calls of Tool the claim takes; <= 0 takes none.
	Max int
}

// Store is everything idemctl needs from a database. All methods are safe for
// concurrent use. Write methods run in one transaction each.
//
// Errors common to every method, besides those each method lists:
//   - ErrUnavailable: the database cannot take the request now (busy past
//     the busy timeout, connection lost, disk full, store closed).
//   - ErrReadOnly: a write method on a store opened read-only; nothing is
//     written.
//   - the caller's ctx.Err() (context.Canceled, DeadlineExceeded) when ctx
//     ended before the request was taken. A write the backend has started
//     runs to its end and reports its own outcome instead.
//   - any other error is a bug or an unexpected database failure; it wraps
//     the driver's error for the log.
type Store interface {
	// CreateOrGet records a new call for (n.Principal, n.IdemKey) or
	// returns the existing one (docs/lifecycle.md, "Create or get"): the
	// same key from two principals is two calls. A known call that failed
	// with retryable=true is reset to pending (RetryReset).
	//
	// A key is either a call's own key or an alias (intent deduplication,
	// NewCall.DedupWindow), never both for one principal: the check of
	// both and the insert of either are one transaction. A request with an
	// alias key and the fingerprint the alias was recorded with returns
	// the aliased call (Existing; it is not reset, even after a retryable
	// failure: the call's own key does that). With DedupWindow > 0, a new
	// key whose intent matches a recent call becomes an alias of it
	// (Deduplicated) instead of creating a call.
	//
	// A key that is neither a call's own key nor an alias, and has a
	// tombstone purged within n.TombstoneRetention, is expired: nothing is
	// recorded. The check and the insert are one transaction, and a purge
	// writes the tombstone in the transaction that deletes the call, so no
	// request sees the key both gone and without its tombstone.
	//
	// Errors: ErrConflict if the key (own or alias) exists with another
	// fingerprint (nothing changes; the error is a *ConflictError naming
	// the existing call); ErrKeyExpired (an *ExpiredError with the
	// tombstone) for an expired key, whatever the fingerprint; ErrRefused if the database refuses the new row for good (e.g.
	// a call id already used by another key).
	CreateOrGet(ctx context.Context, n NewCall) (Call, Outcome, error)

	// ClaimNext claims up to limit runnable calls for owner: pending calls
	// whose not-before time (Call.NotBefore) is unset or has passed by the
	// database's clock, and running calls whose lease has expired. Each claim is a conditional
	// update (exactly one claimer wins), increments attempt, sets the lease
	// to the database's now + lease, and audits claimed with the owner.
	// Oldest first. Returns the claimed calls (possibly none, never nil);
	// limit <= 0 claims nothing.
	//
	//
	// quotas cap the calls of some tools this claim may take (per-tool
	// concurrency, docs/operations.md, "Limits"): at most Max calls of
	// Tool, none if Max <= 0. A call of a capped tool past its quota is
	// passed over, not claimed, so it never waits under a lease; the claim
	// may then return fewer than limit calls although more are runnable
	// (the caller claims again without the full tool). Tools without a
	// quota are not capped.
	//
	// Errors: a plain error for a negative lease (nothing is claimed).
	ClaimNext(ctx context.Context, owner string, lease time.Duration, limit int, quotas ...ToolQuota) ([]Call, error)

	// Succeed marks the call succeeded, stores the result and inserts the
	// effect (if any) in one transaction, fenced on (owner, attempt).
	//
	// Errors: ErrFenced if the call is not running under exactly that
	// owner and attempt (a stale or repeated completion): nothing is
	// written but one fenced audit row, and no effect. ErrNotFound if there
	// is no such call. ErrRefused if the database refuses the completion
	// for good (e.g. the effect id belongs to another call): nothing is
	// written. A plain error, before any write, for an invalid effect
	// (CheckEffect).
	Succeed(ctx context.Context, c Completion) (Call, error)

	// Fail marks the call failed with c.Error (an empty error is stored as
	// {}), fenced like Succeed, with the same errors.
	Fail(ctx context.Context, c Completion) (Call, error)

	// Redrive returns one failed call to pending (docs/operations.md,
	// "Redrive") through the same reset as a same-key retry (RetryReset):
	// error and result cleared, attempt and fingerprint kept, not-before
	// cleared; audited redriven with DetailRedriven(by, the failure). It
	// resets the call only if it is still failed with exactly prevErr, the
	// error the caller selected it for (Redrivable decides, above the
	// store), so a call reset or changed meanwhile is left alone: then
	// ok is false and nothing is written.
	//
	// Errors: ErrNotFound if there is no such call.
	Redrive(ctx context.Context, callID, by string, prevErr json.RawMessage) (c Call, ok bool, err error)

	// RecordLookup audits a lookup's verdict (event, one of LookupEvents,
	// with detail) for the attempt running under l, before the attempt
	// runs or the call completes (docs/tools.md, "Unknown outcomes"). It
	// changes nothing else: the completion that follows settles the
	// call's Unknown.
	//
	// Errors: ErrNotHeld if the call is not running under exactly that
	// owner and attempt: nothing is written. ErrNotFound if there is no
	// such call. A plain error for an event not in LookupEvents.
	RecordLookup(ctx context.Context, l Lease, event, detail string) error

	// Resolve settles a failed call as r says, in one transaction, if it
	// is still failed with exactly r.PrevErr (Resolvable decides, above
	// the store, which calls may be resolved): succeeded with r.Result
	// and r.Effect (inserted as Succeed does, unique per call), or failed
	// with r.Error; Unknown cleared, attempt kept; audited resolved with
	// DetailResolved. A call changed meanwhile is left alone: ok is false
	// and nothing is written.
	//
	// Errors: ErrNotFound if there is no such call. A plain error, before
	// any write, for an invalid effect (CheckEffect).
	Resolve(ctx context.Context, r Resolution) (c Call, ok bool, err error)

	// ScheduleRetry is a server-side retry (docs/lifecycle.md, "Server-side
	// retries"): fenced like Fail, in one transaction, it returns the call
	// to pending with its not-before time set to the database's now +
	// delay, clears the lease and the owner, keeps the attempt (the next
	// claim increments it) and stores the failure c.Error (FailureJSON) as
	// the call's error, the reason it waits, until the next claim clears
	// it; the failure goes to the audit too, retry_scheduled with
	// DetailRetryScheduled. Whether to retry, and the delay, are the
	// caller's decision.
	//
	// Errors: ErrFenced if the call is not running under exactly that
	// owner and attempt: nothing is written but one fenced audit row.
	// ErrNotFound if there is no such call. A plain error, before any
	// write, for a negative delay.
	ScheduleRetry(ctx context.Context, c Completion, delay time.Duration) (Call, error)

	// RecoverExpired returns running calls whose lease has expired (by the
	// database's clock) to pending, audits recover for each, and returns
	// their ids (never nil). Live leases are never touched. A running call
	// without a lease deadline (lease_until NULL: no code path writes one,
	// but a hand-edited or damaged row may) is recovered too: nothing would
	// ever expire it, and a pending call is the safe state to leave it in.
	RecoverExpired(ctx context.Context) ([]string, error)

	// Release returns one running call to pending at once if it is still
	// held under l (audit recover, detail = reason). Used when
	// the owner process is known to be dead (same host, pid gone).
	//
	// Errors: ErrNotHeld if the call is not running under exactly that
	// owner and attempt (it was completed, recovered or taken over
	// meanwhile): nothing changes. ErrNotFound if there is no such call.
	Release(ctx context.Context, l Lease, reason string) error

	// ExtendLease is a worker's heartbeat: it moves the lease of a call
	// running under exactly l to the database's now + lease, and writes no audit row (the completion counts the
	// extensions, Completion.Extensions). A lease that has lapsed but was
	// not yet recovered or claimed by another worker is still this
	// worker's, and is extended.
	//
	// Errors: ErrNotHeld if the call is not running under exactly that
	// owner and attempt (completed, recovered or taken over meanwhile):
	// nothing changes, and the worker has lost the call for good (its
	// completion will be fenced). ErrNotFound if there is no such call. A
	// plain error for a lease <= 0 (nothing changes). ErrCancelRequested
	// if the lease was extended but the call has cancel_requested set
	// (docs/lifecycle.md, "Cancel"): the worker stops the tool.
	ExtendLease(ctx context.Context, l Lease, lease time.Duration) error

	// Queue counts the pending calls and measures the age of the oldest.
	// It reads an index of pending calls only (its cost grows with the
	// number pending, not with the table).
	Queue(ctx context.Context) (Queue, error)

	// PendingByPrincipal counts the pending calls of every principal that
	// has at least atLeast of them (atLeast < 1 counts 1), for the
	// per-principal back-pressure of new keys. It reads every pending
	// call, so the caller asks only when the queue is long enough for a
	// principal to reach its limit.
	PendingByPrincipal(ctx context.Context, atLeast int64) (map[string]int64, error)

	// Cancel stops a call (docs/lifecycle.md, "Cancel"): a pending one is
	// failed with errJSON at once, a running one gets cancel_requested (its
	// worker stops it), a final one is left as it is (AlreadyFinal). The
	// decision and the change are one transaction, so a cancel racing a
	// claim or a completion sees exactly one of the states. Returns the
	// call as it is afterwards.
	//
	// notify, if set, is the webhook delivery written in the transaction
	// that fails a pending call (the call's notify_url: the caller read the
	// call); it is not written for the other outcomes.
	//
	// Errors: ErrNotFound if there is no such call.
	Cancel(ctx context.Context, callID string, errJSON json.RawMessage, notify *NewDelivery) (Call, CancelOutcome, error)

	// ClaimDeliveries claims up to limit webhook deliveries for owner:
	// pending ones whose next time has come and that no live lease holds
	// (a sender that died leaves a lease that lapses), oldest next time
	// first. Each claim increments Attempts and sets the lease to the
	// database's now + lease, in one transaction, so several instances on
	// one database never send one delivery at the same time. Returns the
	// claimed deliveries (never nil); limit <= 0 claims nothing.
	ClaimDeliveries(ctx context.Context, owner string, lease time.Duration, limit int) ([]Delivery, error)

	// EndDelivery records how one claimed attempt ended (DeliveryEnd) and
	// its audit row on the call (DeliveryEvent), in one transaction, fenced
	// on (ID, Owner, Attempts): delivered, pending again after Delay, or
	// failed for good.
	//
	// Errors: ErrNotHeld if the delivery is not pending under exactly that
	// claim (its lease lapsed and another sender took it): nothing
	// changes. A plain error for a bad argument (CheckDeliveryEnd).
	EndDelivery(ctx context.Context, e DeliveryEnd) error

	// Deliveries returns a call's deliveries, oldest first (never nil).
	Deliveries(ctx context.Context, callID string) ([]Delivery, error)

	// PendingDeliveries counts the deliveries not yet delivered or given
	// up (an index of pending ones only).
	PendingDeliveries(ctx context.Context) (int64, error)

	// Get returns principal's call with that id, or ErrNotFound: another
	// principal's call does not exist for this one (docs/api.md,
	// "Authentication"). Every read on a principal's behalf uses it.
	Get(ctx context.Context, principal, callID string) (Call, error)
	// GetAny returns the call with that id whoever recorded it, or
	// ErrNotFound: for the executor and inspect, which act for no
	// principal.
	GetAny(ctx context.Context, callID string) (Call, error)
	// GetByKey returns principal's call for an idempotency key (both
	// compared exactly), or ErrNotFound; another principal's call with
	// that key is not found. An alias key (intent deduplication) finds the
	// call it aliases.
	GetByKey(ctx context.Context, principal, key string) (Call, error)
	// ListCalls returns calls newest first (never nil), narrowed by f.
	// With f.Keyset(), ties on created_at are ordered by call_id
	// descending, so pages cut with Cursor neither skip nor repeat a call.
	ListCalls(ctx context.Context, f ListFilter) ([]Call, error)
	// ListEffects returns effects newest first (limit 0 = all).
	ListEffects(ctx context.Context, limit int) ([]Effect, error)
	// EffectOf returns the effect row of a call (effects.call_id is
	// unique), or ErrNotFound when the call left none.
	EffectOf(ctx context.Context, callID string) (Effect, error)
	// Audit returns audit rows in order; callID "" means all calls
	// (limit 0 = all; with a limit, the newest limit rows, still in order).
	// An unknown call has no rows: an empty list, not ErrNotFound.
	Audit(ctx context.Context, callID string, limit int) ([]AuditEvent, error)
	// Dupes returns calls with more than one effect (must be empty).
	Dupes(ctx context.Context) ([]Dupe, error)
	// Attempts returns the attempt distribution, by attempt ascending.
	Attempts(ctx context.Context) ([]AttemptBucket, error)
	// Rates counts, per minute of the database's clock, the calls created
	// and the calls that became final (succeeded or failed, by their last
	// update) over the last minutes whole minutes plus the current one
	// (docs/console.md, "Rates"). It reads the calls table only, so every
	// instance on one database sees the same numbers, before and after a
	// restart; a purged call is no longer counted. The backend returns the
	// minutes that have calls; FillRates completes the series.
	//
	// Errors: a plain error for minutes < 0 or > MaxRateMinutes.
	Rates(ctx context.Context, minutes int) (Rates, error)
	// Stats counts calls, effects and calls by status.
	Stats(ctx context.Context) (Stats, error)

	// Purge deletes up to limit final calls (succeeded or failed) whose
	// last update is older than olderThan by the database's clock, oldest
	// first, with their audit rows, in one short transaction, and returns
	// how many it deleted (docs/operations.md, "Retention"). Pending and
	// running calls are never purged. Effect rows are kept: they record
	// what was done downstream, and effects.call_id stays UNIQUE without
	// the call row, so no second effect can ever be written for a purged
	// call id. With tombstones, each purged call's own key and alias keys
	// leave a Tombstone stamped with the database's now, in the same
	// transaction (replacing an older tombstone of the key); without, a
	// purged key is unknown again: the next request with it records a new
	// call. limit <= 0 purges nothing.
	//
	// Errors: a plain error for a negative olderThan (nothing is purged).
	Purge(ctx context.Context, olderThan time.Duration, limit int, tombstones bool) (int, error)

	// PurgeTombstones deletes up to limit tombstones purged more than
	// olderThan ago by the database's clock, oldest first, in one short
	// transaction, and returns how many. limit <= 0 deletes nothing.
	//
	// Errors: a plain error for a negative olderThan (nothing is deleted).
	PurgeTombstones(ctx context.Context, olderThan time.Duration, limit int) (int, error)

	// Tombstone returns principal's tombstone of key (both compared
	// exactly), however old, or ErrNotFound.
	Tombstone(ctx context.Context, principal, key string) (Tombstone, error)

	// GateStore keeps the rate limits' and breakers' shared state
	// (gate.go).
	GateStore

	// Ping checks the database is reachable (/readyz). Errors:
	// ErrUnavailable (also once the store is closed), or ctx's error.
	Ping(ctx context.Context) error
	// Close releases the database. It is safe to call more than once;
	// every later call of another method fails with ErrUnavailable.
	Close() error
}

// Options configure opening a store.
type Options struct {
	// ReadOnly opens the database for reading only (inspect): SQLite is
	// opened with mode=ro so it is safe while a server writes.
	ReadOnly bool
	// BusyTimeout bounds how long a write waits for the lock (SQLite) before
	// ErrUnavailable. Zero means the backend default (5s).
	BusyTimeout time.Duration
	// BeforeCommit, if set, runs inside each write's transaction, after
	// its statements and before COMMIT, when the write changed at least
	// one row; an error rolls the write back and is its answer. It is how
	// the before-commit failpoints reach the backends (FailpointHook with
	// Write.BeforeCommit); nil in production. The fenced audit row and
	// Purge do not run it. PostgreSQL's one-round-trip writes run their
	// same pipelined statements inside an explicit transaction while it
	// is set, so that it has a place between them and the commit.
	BeforeCommit func(w Write) error
}
