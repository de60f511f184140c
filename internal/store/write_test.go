package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/failpoint"
	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/storefake"
)

// writeMethods and readMethods classify every method of store.Store. A
// method added to the interface is in neither until someone decides, and
// TestObserveCoversEveryWrite fails until they do: a new write must get a
// store.Write, and so its hooks, its failpoints and its write health.
var (
	writeMethods = map[string]store.Write{
		"CreateOrGet":    store.WriteCreate,
		"ClaimNext":      store.WriteClaim,
		"ExtendLease":    store.WriteLease,
		"Succeed":        store.WriteSucceed,
		"Fail":           store.WriteFail,
		"ScheduleRetry":  store.WriteRetry,
		"RecoverExpired": store.WriteRecover,
		"Release":        store.WriteRelease,
		"Cancel":         store.WriteCancel,
		"Purge":          store.WritePurge,
		// PurgeTombstones: the tombstones' own retention.
		"PurgeTombstones": store.WritePurgeTombstones,
		"Redrive":         store.WriteRedrive,
		"RecordLookup":    store.WriteLookup,
		"Resolve":         store.WriteResolve,
		"Admit":           store.WriteAdmit,
		"Unadmit":         store.WriteUnadmit,
		"ReportAttempt":   store.WriteReport,
		"ClaimDeliveries": store.WriteDeliveryClaim,
		"EndDelivery":     store.WriteDeliveryEnd,
	}
	readMethods = map[string]bool{
		"Queue": true, "PendingByPrincipal": true, "Get": true, "GetAny": true, "GetByKey": true, "ListCalls": true, "ListEffects": true, "EffectOf": true,
		"Audit": true, "Dupes": true, "Attempts": true, "Rates": true, "Stats": true, "Ping": true, "Close": true,
		"Tombstone": true, "GateStates": true, "Deliveries": true, "PendingDeliveries": true,
	}
)

// TestObserveCoversEveryWrite: every method of store.Store is a write or a
// read; every write has its own store.Write; and a write that committed a
// change through Observe runs AfterCommit and Done with its Write, once,
// while a read runs neither.
func TestObserveCoversEveryWrite(t *testing.T) {
	iface := reflect.TypeFor[store.Store]()
	var seen []store.Write
	for i := range iface.NumMethod() {
		name := iface.Method(i).Name
		w, isWrite := writeMethods[name]
		if !isWrite && !readMethods[name] {
			t.Errorf("store.Store.%s is neither a write nor a read here: give it a store.Write (and Observe a method for it) or list it as a read", name)
			continue
		}
		var after, done []store.Write
		st := store.Observe(changing(), store.Hooks{
			AfterCommit: func(w store.Write) error { after = append(after, w); return nil },
			Done:        func(w store.Write, err error) { done = append(done, w) },
		})
		call(t, st, name)
		if !isWrite {
			if len(after)+len(done) != 0 {
				t.Errorf("read %s ran the write hooks: after %v, done %v", name, after, done)
			}
			continue
		}
		seen = append(seen, w)
		if !slices.Equal(after, []store.Write{w}) || !slices.Equal(done, []store.Write{w}) {
			t.Errorf("%s through Observe: AfterCommit saw %v, Done saw %v; want [%v] each", name, after, done, w)
		}
	}
	slices.Sort(seen)
	if !slices.Equal(seen, store.Writes) {
		t.Errorf("the write methods map to %v, want each of store.Writes once: %v", seen, store.Writes)
	}
}

// call calls st's method name with zero arguments (a live context).
func call(t *testing.T, st store.Store, name string) {
	t.Helper()
	m := reflect.ValueOf(st).MethodByName(name)
	typ := m.Type()
	n := typ.NumIn()
	if typ.IsVariadic() {
		n--
	}
	args := make([]reflect.Value, n)
	for i := range n {
		if typ.In(i) == reflect.TypeFor[context.Context]() {
			args[i] = reflect.ValueOf(context.Background())
		} else {
			args[i] = reflect.Zero(typ.In(i))
		}
	}
	m.Call(args)
}

// TestObserveOnlyAfterAChange: AfterCommit runs only when the write
// committed a change; a failed write reaches Done with its error; an
// AfterCommit error is the write's answer.
func TestObserveOnlyAfterAChange(t *testing.T) {
	var after []store.Write
	var doneErr error
	hooks := store.Hooks{
		AfterCommit: func(w store.Write) error { after = append(after, w); return nil },
		Done:        func(w store.Write, err error) { doneErr = err },
	}
	st := store.Observe(unchanging(), hooks)
	ctx := t.Context()
	if _, out, err := st.CreateOrGet(ctx, store.NewCall{}); err != nil || out != store.Existing {
		t.Fatalf("replay: %v, %v", out, err)
	}
	if _, err := st.ClaimNext(ctx, "w", time.Second, 1); err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.Cancel(ctx, "c", nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Succeed(ctx, store.Completion{}); !errors.Is(err, store.ErrFenced) || !errors.Is(doneErr, store.ErrFenced) {
		t.Fatalf("fenced completion: %v (Done saw %v)", err, doneErr)
	}
	if err := st.ExtendLease(ctx, store.Lease{CallID: "c", Owner: "w", Attempt: 1}, time.Second); !errors.Is(err, store.ErrCancelRequested) || doneErr != nil {
		t.Fatalf("extension with a cancel request: %v (Done saw %v, want nil: it was extended)", err, doneErr)
	}
	if !slices.Equal(after, []store.Write{store.WriteLease}) {
		t.Errorf("AfterCommit ran for %v; want only the extension (the rest changed nothing)", after)
	}

	boom := errors.New("boom")
	st = store.Observe(changing(), store.Hooks{AfterCommit: func(store.Write) error { return boom }})
	if c, _, err := st.CreateOrGet(ctx, store.NewCall{}); !errors.Is(err, boom) || c.CallID != "" {
		t.Errorf("CreateOrGet with a failing AfterCommit = %+v, %v; want no call and its error", c, err)
	}
}

// TestFailpointHook: a failpoint's injected error reaches the store's
// callers as ErrUnavailable, naming the point; purge has no points.
func TestFailpointHook(t *testing.T) {
	r, err := failpoint.Parse("retry/after-commit=error;create/before-commit=error", store.Failpoints())
	if err != nil {
		t.Fatal(err)
	}
	after := store.FailpointHook(r, store.Write.AfterCommit)
	err = after(store.WriteRetry)
	if !errors.Is(err, store.ErrUnavailable) || !errors.Is(err, failpoint.ErrInjected) || !strings.Contains(err.Error(), "retry/after-commit") {
		t.Errorf("after-commit hook = %v, want ErrInjected as ErrUnavailable naming the point", err)
	}
	if err := after(store.WriteCreate); err != nil {
		t.Errorf("an unarmed point: %v", err)
	}
	if err := store.FailpointHook(r, store.Write.BeforeCommit)(store.WriteCreate); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("before-commit hook = %v", err)
	}
	if store.FailpointHook(nil, store.Write.AfterCommit) != nil {
		t.Error("no registry must give no hook")
	}
	if _, err := failpoint.Parse("purge/after-commit=error", store.Failpoints()); err == nil {
		t.Error("purge has no failpoints, but purge/after-commit was accepted")
	}
	if _, err := failpoint.Parse("purge-tombstones/after-commit=error", store.Failpoints()); err == nil {
		t.Error("purge-tombstones has no failpoints, but purge-tombstones/after-commit was accepted")
	}
	if _, err := failpoint.Parse("redrive/after-commit=error", store.Failpoints()); err == nil {
		t.Error("redrive has no failpoints, but redrive/after-commit was accepted")
	}
	for _, w := range []string{"lookup", "resolve", "admit", "unadmit", "report", "delivery-claim", "delivery-end"} {
		if _, err := failpoint.Parse(w+"/after-commit=error", store.Failpoints()); err == nil {
			t.Errorf("%s has no failpoints, but %s/after-commit was accepted", w, w)
		}
	}
	if n := len(store.Failpoints()); n != 2*(len(store.Writes)-10) {
		t.Errorf("%d failpoints, want two for each write but the two purges, redrive, lookup, resolve, the three gate writes and the two delivery writes", n)
	}
}

// changing is a store whose every write commits a change, and whose
// reads answer nothing.
func changing() *storefake.Store {
	return &storefake.Store{
		CreateOrGetFunc: func(context.Context, store.NewCall) (store.Call, store.Outcome, error) {
			return store.Call{CallID: "c"}, store.Created, nil
		},
		ClaimNextFunc: func(context.Context, string, time.Duration, int, ...store.ToolQuota) ([]store.Call, error) {
			return []store.Call{{CallID: "c"}}, nil
		},
		SucceedFunc:        func(context.Context, store.Completion) (store.Call, error) { return store.Call{}, nil },
		FailFunc:           func(context.Context, store.Completion) (store.Call, error) { return store.Call{}, nil },
		ScheduleRetryFunc:  func(context.Context, store.Completion, time.Duration) (store.Call, error) { return store.Call{}, nil },
		RecoverExpiredFunc: func(context.Context) ([]string, error) { return []string{"c"}, nil },
		ReleaseFunc:        func(context.Context, store.Lease, string) error { return nil },
		ExtendLeaseFunc:    func(context.Context, store.Lease, time.Duration) error { return nil },
		CancelFunc: func(context.Context, string, json.RawMessage, *store.NewDelivery) (store.Call, store.CancelOutcome, error) {
			return store.Call{}, store.Canceled, nil
		},
		ClaimDeliveriesFunc: func(context.Context, string, time.Duration, int) ([]store.Delivery, error) {
			return []store.Delivery{{ID: "wh_1"}}, nil
		},
		EndDeliveryFunc:     func(context.Context, store.DeliveryEnd) error { return nil },
		PurgeFunc:           func(context.Context, time.Duration, int, bool) (int, error) { return 1, nil },
		PurgeTombstonesFunc: func(context.Context, time.Duration, int) (int, error) { return 1, nil },
		RedriveFunc: func(context.Context, string, string, json.RawMessage) (store.Call, bool, error) {
			return store.Call{}, true, nil
		},
		RecordLookupFunc: func(context.Context, store.Lease, string, string) error { return nil },
		ResolveFunc: func(context.Context, store.Resolution) (store.Call, bool, error) {
			return store.Call{}, true, nil
		},
		AdmitFunc:   func(context.Context, store.Gate, int) (store.Admission, error) { return store.Admission{}, nil },
		UnadmitFunc: func(context.Context, store.Gate, int, bool) error { return nil },
		ReportAttemptFunc: func(context.Context, store.Gate, store.GateOutcome) (store.GateState, error) {
			return store.GateState{}, nil
		},
		GateStatesFunc: func(context.Context) ([]store.GateState, error) { return nil, nil },

		QueueFunc:              func(context.Context) (store.Queue, error) { return store.Queue{}, nil },
		PendingByPrincipalFunc: func(context.Context, int64) (map[string]int64, error) { return nil, nil },
		TombstoneFunc:          func(context.Context, string, string) (store.Tombstone, error) { return store.Tombstone{}, nil },
		DeliveriesFunc:         func(context.Context, string) ([]store.Delivery, error) { return nil, nil },
		PendingDeliveriesFunc:  func(context.Context) (int64, error) { return 0, nil },
		GetFunc:                func(context.Context, string, string) (store.Call, error) { return store.Call{}, nil },
		GetAnyFunc:             func(context.Context, string) (store.Call, error) { return store.Call{}, nil },
		GetByKeyFunc:           func(context.Context, string, string) (store.Call, error) { return store.Call{}, nil },
		ListCallsFunc:          func(context.Context, store.ListFilter) ([]store.Call, error) { return nil, nil },
		ListEffectsFunc:        func(context.Context, int) ([]store.Effect, error) { return nil, nil },
		EffectOfFunc:           func(context.Context, string) (store.Effect, error) { return store.Effect{}, nil },
		AuditFunc:              func(context.Context, string, int) ([]store.AuditEvent, error) { return nil, nil },
		DupesFunc:              func(context.Context) ([]store.Dupe, error) { return nil, nil },
		AttemptsFunc:           func(context.Context) ([]store.AttemptBucket, error) { return nil, nil },
		RatesFunc:              func(context.Context, int) (store.Rates, error) { return store.Rates{}, nil },
		StatsFunc:              func(context.Context) (store.Stats, error) { return store.Stats{}, nil },
		PingFunc:               func(context.Context) error { return nil },
		CloseFunc:              func() error { return nil },
	}
}

// unchanging is a store whose writes change nothing (or are fenced).
func unchanging() *storefake.Store {
	s := changing()
	s.CreateOrGetFunc = func(context.Context, store.NewCall) (store.Call, store.Outcome, error) {
		return store.Call{CallID: "c"}, store.Existing, nil
	}
	s.ClaimNextFunc = func(context.Context, string, time.Duration, int, ...store.ToolQuota) ([]store.Call, error) {
		return []store.Call{}, nil
	}
	s.SucceedFunc = func(context.Context, store.Completion) (store.Call, error) { return store.Call{}, store.ErrFenced }
	s.ExtendLeaseFunc = func(context.Context, store.Lease, time.Duration) error { return store.ErrCancelRequested }
	s.CancelFunc = func(context.Context, string, json.RawMessage, *store.NewDelivery) (store.Call, store.CancelOutcome, error) {
		return store.Call{}, store.AlreadyFinal, nil
	}
	return s
}
