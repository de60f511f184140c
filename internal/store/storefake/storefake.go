// Package storefake is a store.Store for tests that need a store to answer
// otherwise than a real one would (refuse a completion, count a query,
// panic, be unreachable). It has one function field per method, as
// litestream's mock package does: a test sets the fields of the methods it
// changes, and every other method goes to Base, usually a real store. A
// method with neither its field nor Base panics, naming itself, so a test
// never passes on an answer nobody chose.
package storefake

import (
	"context"
	"encoding/json"
	"time"

	"github.com/idemctl/idemctl/internal/store"
)

// The compile-time check that Store has every method of store.Store: a
// method added to the interface must get a field and a method here.
var _ store.Store = (*Store)(nil)

// Store answers each method with its ...Func field when set, else with
// Base. It is safe for concurrent use when its functions and Base are.
type Store struct {
	// Base answers the methods whose function is nil.
	Base                   store.Store
	CreateOrGetFunc        func(ctx context.Context, n store.NewCall) (store.Call, store.Outcome, error)
	ClaimNextFunc          func(ctx context.Context, owner string, lease time.Duration, limit int, quotas ...store.ToolQuota) ([]store.Call, error)
	SucceedFunc            func(ctx context.Context, c store.Completion) (store.Call, error)
	FailFunc               func(ctx context.Context, c store.Completion) (store.Call, error)
	ScheduleRetryFunc      func(ctx context.Context, c store.Completion, delay time.Duration) (store.Call, error)
	RecoverExpiredFunc     func(ctx context.Context) ([]string, error)
	ReleaseFunc            func(ctx context.Context, l store.Lease, reason string) error
	ExtendLeaseFunc        func(ctx context.Context, l store.Lease, lease time.Duration) error
	QueueFunc              func(ctx context.Context) (store.Queue, error)
	CancelFunc             func(ctx context.Context, callID string, errJSON json.RawMessage, notify *store.NewDelivery) (store.Call, store.CancelOutcome, error)
	ClaimDeliveriesFunc    func(ctx context.Context, owner string, lease time.Duration, limit int) ([]store.Delivery, error)
	EndDeliveryFunc        func(ctx context.Context, e store.DeliveryEnd) error
	DeliveriesFunc         func(ctx context.Context, callID string) ([]store.Delivery, error)
	PendingDeliveriesFunc  func(ctx context.Context) (int64, error)
	GetFunc                func(ctx context.Context, principal string, callID string) (store.Call, error)
	GetAnyFunc             func(ctx context.Context, callID string) (store.Call, error)
	GetByKeyFunc           func(ctx context.Context, principal string, key string) (store.Call, error)
	ListCallsFunc          func(ctx context.Context, f store.ListFilter) ([]store.Call, error)
	ListEffectsFunc        func(ctx context.Context, limit int) ([]store.Effect, error)
	EffectOfFunc           func(ctx context.Context, callID string) (store.Effect, error)
	AuditFunc              func(ctx context.Context, callID string, limit int) ([]store.AuditEvent, error)
	DupesFunc              func(ctx context.Context) ([]store.Dupe, error)
	AttemptsFunc           func(ctx context.Context) ([]store.AttemptBucket, error)
	RatesFunc              func(ctx context.Context, minutes int) (store.Rates, error)
	StatsFunc              func(ctx context.Context) (store.Stats, error)
	PurgeFunc              func(ctx context.Context, olderThan time.Duration, limit int, tombstones bool) (int, error)
	PurgeTombstonesFunc    func(ctx context.Context, olderThan time.Duration, limit int) (int, error)
	RedriveFunc            func(ctx context.Context, callID, by string, prevErr json.RawMessage) (store.Call, bool, error)
	RecordLookupFunc       func(ctx context.Context, l store.Lease, event, detail string) error
	ResolveFunc            func(ctx context.Context, r store.Resolution) (store.Call, bool, error)
	TombstoneFunc          func(ctx context.Context, principal, key string) (store.Tombstone, error)
	PendingByPrincipalFunc func(ctx context.Context, atLeast int64) (map[string]int64, error)
	AdmitFunc              func(ctx context.Context, g store.Gate, want int) (store.Admission, error)
	UnadmitFunc            func(ctx context.Context, g store.Gate, unused int, probe bool) error
	ReportAttemptFunc      func(ctx context.Context, g store.Gate, o store.GateOutcome) (store.GateState, error)
	GateStatesFunc         func(ctx context.Context) ([]store.GateState, error)
	PingFunc               func(ctx context.Context) error
	CloseFunc              func() error
}

// CreateOrGet calls CreateOrGetFunc, else Base.CreateOrGet.
func (s *Store) CreateOrGet(ctx context.Context, n store.NewCall) (store.Call, store.Outcome, error) {
	if s.CreateOrGetFunc != nil {
		return s.CreateOrGetFunc(ctx, n)
	}
	return s.base("CreateOrGet").CreateOrGet(ctx, n)
}

// ClaimNext calls ClaimNextFunc, else Base.ClaimNext.
func (s *Store) ClaimNext(ctx context.Context, owner string, lease time.Duration, limit int, quotas ...store.ToolQuota) ([]store.Call, error) {
	if s.ClaimNextFunc != nil {
		return s.ClaimNextFunc(ctx, owner, lease, limit, quotas...)
	}
	return s.base("ClaimNext").ClaimNext(ctx, owner, lease, limit, quotas...)
}

// Succeed calls SucceedFunc, else Base.Succeed.
func (s *Store) Succeed(ctx context.Context, c store.Completion) (store.Call, error) {
	if s.SucceedFunc != nil {
		return s.SucceedFunc(ctx, c)
	}
	return s.base("Succeed").Succeed(ctx, c)
}

// Fail calls FailFunc, else Base.Fail.
func (s *Store) Fail(ctx context.Context, c store.Completion) (store.Call, error) {
	if s.FailFunc != nil {
		return s.FailFunc(ctx, c)
	}
	return s.base("Fail").Fail(ctx, c)
}

// ScheduleRetry calls ScheduleRetryFunc, else Base.ScheduleRetry.
func (s *Store) ScheduleRetry(ctx context.Context, c store.Completion, delay time.Duration) (store.Call, error) {
	if s.ScheduleRetryFunc != nil {
		return s.ScheduleRetryFunc(ctx, c, delay)
	}
	return s.base("ScheduleRetry").ScheduleRetry(ctx, c, delay)
}

// RecoverExpired calls RecoverExpiredFunc, else Base.RecoverExpired.
func (s *Store) RecoverExpired(ctx context.Context) ([]string, error) {
	if s.RecoverExpiredFunc != nil {
		return s.RecoverExpiredFunc(ctx)
	}
	return s.base("RecoverExpired").RecoverExpired(ctx)
}

// Release calls ReleaseFunc, else Base.Release.
func (s *Store) Release(ctx context.Context, l store.Lease, reason string) error {
	if s.ReleaseFunc != nil {
		return s.ReleaseFunc(ctx, l, reason)
	}
	return s.base("Release").Release(ctx, l, reason)
}

// ExtendLease calls ExtendLeaseFunc, else Base.ExtendLease.
func (s *Store) ExtendLease(ctx context.Context, l store.Lease, lease time.Duration) error {
	if s.ExtendLeaseFunc != nil {
		return s.ExtendLeaseFunc(ctx, l, lease)
	}
	return s.base("ExtendLease").ExtendLease(ctx, l, lease)
}

// Queue calls QueueFunc, else Base.Queue.
func (s *Store) Queue(ctx context.Context) (store.Queue, error) {
	if s.QueueFunc != nil {
		return s.QueueFunc(ctx)
	}
	return s.base("Queue").Queue(ctx)
}

// Cancel calls CancelFunc, else Base.Cancel.
func (s *Store) Cancel(ctx context.Context, callID string, errJSON json.RawMessage, notify *store.NewDelivery) (store.Call, store.CancelOutcome, error) {
	if s.CancelFunc != nil {
		return s.CancelFunc(ctx, callID, errJSON, notify)
	}
	return s.base("Cancel").Cancel(ctx, callID, errJSON, notify)
}

// Get calls GetFunc, else Base.Get.
func (s *Store) Get(ctx context.Context, principal string, callID string) (store.Call, error) {
	if s.GetFunc != nil {
		return s.GetFunc(ctx, principal, callID)
	}
	return s.base("Get").Get(ctx, principal, callID)
}

// GetAny calls GetAnyFunc, else Base.GetAny.
func (s *Store) GetAny(ctx context.Context, callID string) (store.Call, error) {
	if s.GetAnyFunc != nil {
		return s.GetAnyFunc(ctx, callID)
	}
	return s.base("GetAny").GetAny(ctx, callID)
}

// GetByKey calls GetByKeyFunc, else Base.GetByKey.
func (s *Store) GetByKey(ctx context.Context, principal string, key string) (store.Call, error) {
	if s.GetByKeyFunc != nil {
		return s.GetByKeyFunc(ctx, principal, key)
	}
	return s.base("GetByKey").GetByKey(ctx, principal, key)
}

// ListCalls calls ListCallsFunc, else Base.ListCalls.
func (s *Store) ListCalls(ctx context.Context, f store.ListFilter) ([]store.Call, error) {
	if s.ListCallsFunc != nil {
		return s.ListCallsFunc(ctx, f)
	}
	return s.base("ListCalls").ListCalls(ctx, f)
}

// ListEffects calls ListEffectsFunc, else Base.ListEffects.
func (s *Store) ListEffects(ctx context.Context, limit int) ([]store.Effect, error) {
	if s.ListEffectsFunc != nil {
		return s.ListEffectsFunc(ctx, limit)
	}
	return s.base("ListEffects").ListEffects(ctx, limit)
}

// EffectOf calls EffectOfFunc, else Base.EffectOf.
func (s *Store) EffectOf(ctx context.Context, callID string) (store.Effect, error) {
	if s.EffectOfFunc != nil {
		return s.EffectOfFunc(ctx, callID)
	}
	return s.base("EffectOf").EffectOf(ctx, callID)
}

// Audit calls AuditFunc, else Base.Audit.
func (s *Store) Audit(ctx context.Context, callID string, limit int) ([]store.AuditEvent, error) {
	if s.AuditFunc != nil {
		return s.AuditFunc(ctx, callID, limit)
	}
	return s.base("Audit").Audit(ctx, callID, limit)
}

// Dupes calls DupesFunc, else Base.Dupes.
func (s *Store) Dupes(ctx context.Context) ([]store.Dupe, error) {
	if s.DupesFunc != nil {
		return s.DupesFunc(ctx)
	}
	return s.base("Dupes").Dupes(ctx)
}

// Attempts calls AttemptsFunc, else Base.Attempts.
func (s *Store) Attempts(ctx context.Context) ([]store.AttemptBucket, error) {
	if s.AttemptsFunc != nil {
		return s.AttemptsFunc(ctx)
	}
	return s.base("Attempts").Attempts(ctx)
}

// Rates calls RatesFunc, else Base.Rates.
func (s *Store) Rates(ctx context.Context, minutes int) (store.Rates, error) {
	if s.RatesFunc != nil {
		return s.RatesFunc(ctx, minutes)
	}
	return s.base("Rates").Rates(ctx, minutes)
}

// Stats calls StatsFunc, else Base.Stats.
func (s *Store) Stats(ctx context.Context) (store.Stats, error) {
	if s.StatsFunc != nil {
		return s.StatsFunc(ctx)
	}
	return s.base("Stats").Stats(ctx)
}

// Purge calls PurgeFunc, else Base.Purge.
func (s *Store) Purge(ctx context.Context, olderThan time.Duration, limit int, tombstones bool) (int, error) {
	if s.PurgeFunc != nil {
		return s.PurgeFunc(ctx, olderThan, limit, tombstones)
	}
	return s.base("Purge").Purge(ctx, olderThan, limit, tombstones)
}

// PurgeTombstones calls PurgeTombstonesFunc, else Base.PurgeTombstones.
func (s *Store) PurgeTombstones(ctx context.Context, olderThan time.Duration, limit int) (int, error) {
	if s.PurgeTombstonesFunc != nil {
		return s.PurgeTombstonesFunc(ctx, olderThan, limit)
	}
	return s.base("PurgeTombstones").PurgeTombstones(ctx, olderThan, limit)
}

// RecordLookup calls RecordLookupFunc, else Base.RecordLookup.
func (s *Store) RecordLookup(ctx context.Context, l store.Lease, event, detail string) error {
	if s.RecordLookupFunc != nil {
		return s.RecordLookupFunc(ctx, l, event, detail)
	}
	return s.base("RecordLookup").RecordLookup(ctx, l, event, detail)
}

// Resolve calls ResolveFunc, else Base.Resolve.
func (s *Store) Resolve(ctx context.Context, r store.Resolution) (store.Call, bool, error) {
	if s.ResolveFunc != nil {
		return s.ResolveFunc(ctx, r)
	}
	return s.base("Resolve").Resolve(ctx, r)
}

// Redrive calls RedriveFunc, else Base.Redrive.
func (s *Store) Redrive(ctx context.Context, callID, by string, prevErr json.RawMessage) (store.Call, bool, error) {
	if s.RedriveFunc != nil {
		return s.RedriveFunc(ctx, callID, by, prevErr)
	}
	return s.base("Redrive").Redrive(ctx, callID, by, prevErr)
}

// Tombstone calls TombstoneFunc, else Base.Tombstone.
func (s *Store) Tombstone(ctx context.Context, principal, key string) (store.Tombstone, error) {
	if s.TombstoneFunc != nil {
		return s.TombstoneFunc(ctx, principal, key)
	}
	return s.base("Tombstone").Tombstone(ctx, principal, key)
}

// PendingByPrincipal calls PendingByPrincipalFunc, else Base.PendingByPrincipal.
func (s *Store) PendingByPrincipal(ctx context.Context, atLeast int64) (map[string]int64, error) {
	if s.PendingByPrincipalFunc != nil {
		return s.PendingByPrincipalFunc(ctx, atLeast)
	}
	return s.base("PendingByPrincipal").PendingByPrincipal(ctx, atLeast)
}

// Ping calls PingFunc, else Base.Ping.
func (s *Store) Ping(ctx context.Context) error {
	if s.PingFunc != nil {
		return s.PingFunc(ctx)
	}
	return s.base("Ping").Ping(ctx)
}

// Close calls CloseFunc, else Base.Close.
func (s *Store) Close() error {
	if s.CloseFunc != nil {
		return s.CloseFunc()
	}
	return s.base("Close").Close()
}

// base is Base, or a panic naming the method nothing answers.
func (s *Store) base(method string) store.Store {
	if s.Base == nil {
		panic("storefake: " + method + " called with neither " + method + "Func nor Base set")
	}
	return s.Base
}

// Admit calls AdmitFunc, else Base.Admit.
func (s *Store) Admit(ctx context.Context, g store.Gate, want int) (store.Admission, error) {
	if s.AdmitFunc != nil {
		return s.AdmitFunc(ctx, g, want)
	}
	return s.base("Admit").Admit(ctx, g, want)
}

// Unadmit calls UnadmitFunc, else Base.Unadmit.
func (s *Store) Unadmit(ctx context.Context, g store.Gate, unused int, probe bool) error {
	if s.UnadmitFunc != nil {
		return s.UnadmitFunc(ctx, g, unused, probe)
	}
	return s.base("Unadmit").Unadmit(ctx, g, unused, probe)
}

// ReportAttempt calls ReportAttemptFunc, else Base.ReportAttempt.
func (s *Store) ReportAttempt(ctx context.Context, g store.Gate, o store.GateOutcome) (store.GateState, error) {
	if s.ReportAttemptFunc != nil {
		return s.ReportAttemptFunc(ctx, g, o)
	}
	return s.base("ReportAttempt").ReportAttempt(ctx, g, o)
}

// GateStates calls GateStatesFunc, else Base.GateStates.
func (s *Store) GateStates(ctx context.Context) ([]store.GateState, error) {
	if s.GateStatesFunc != nil {
		return s.GateStatesFunc(ctx)
	}
	return s.base("GateStates").GateStates(ctx)
}

// ClaimDeliveries calls ClaimDeliveriesFunc, else Base.ClaimDeliveries.
func (s *Store) ClaimDeliveries(ctx context.Context, owner string, lease time.Duration, limit int) ([]store.Delivery, error) {
	if s.ClaimDeliveriesFunc != nil {
		return s.ClaimDeliveriesFunc(ctx, owner, lease, limit)
	}
	return s.base("ClaimDeliveries").ClaimDeliveries(ctx, owner, lease, limit)
}

// EndDelivery calls EndDeliveryFunc, else Base.EndDelivery.
func (s *Store) EndDelivery(ctx context.Context, e store.DeliveryEnd) error {
	if s.EndDeliveryFunc != nil {
		return s.EndDeliveryFunc(ctx, e)
	}
	return s.base("EndDelivery").EndDelivery(ctx, e)
}

// Deliveries calls DeliveriesFunc, else Base.Deliveries.
func (s *Store) Deliveries(ctx context.Context, callID string) ([]store.Delivery, error) {
	if s.DeliveriesFunc != nil {
		return s.DeliveriesFunc(ctx, callID)
	}
	return s.base("Deliveries").Deliveries(ctx, callID)
}

// PendingDeliveries calls PendingDeliveriesFunc, else Base.PendingDeliveries.
func (s *Store) PendingDeliveries(ctx context.Context) (int64, error) {
	if s.PendingDeliveriesFunc != nil {
		return s.PendingDeliveriesFunc(ctx)
	}
	return s.base("PendingDeliveries").PendingDeliveries(ctx)
}
