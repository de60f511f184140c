package failpoint

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/idemctl/idemctl/internal/store"
)

// Wrap puts the after-commit failpoints around st's writes. They sit above
// the store seam because the rule is the same on both backends: a write
// that returned without error has committed, and the point runs between
// that commit and the caller (SQLite's group commit included: the writer
// learns its batch committed, then the point runs in the writer's
// goroutine). A point fires only when the write changed something (a
// create that only read an existing call, a claim of nothing, a cancel of
// a final call do not reach it). An error action drops the write's result
// and returns ErrInjected: the change is durable and the caller is told it
// failed, the ambiguous outcome a lost connection gives.
//
// The before-commit points are inside each backend's transactions
// (store/sqlite/failpoint.go, store/postgres/failpoint.go).
//
// `idemctl serve` wraps its store only when failpoints are armed, so an
// unarmed server does not even pay the indirection.
func Wrap(st store.Store) store.Store { return &wrapped{Store: st} }

type wrapped struct{ store.Store }

func (w *wrapped) CreateOrGet(ctx context.Context, n store.NewCall) (store.Call, store.Outcome, error) {
	c, out, err := w.Store.CreateOrGet(ctx, n)
	if err == nil && out != store.Existing {
		if err := Eval(CreateAfterCommit); err != nil {
			return store.Call{}, 0, err
		}
	}
	return c, out, err
}

func (w *wrapped) ClaimNext(ctx context.Context, owner string, lease time.Duration, limit int, quotas ...store.ToolQuota) ([]store.Call, error) {
	calls, err := w.Store.ClaimNext(ctx, owner, lease, limit, quotas...)
	if err == nil && len(calls) > 0 {
		if err := Eval(ClaimAfterCommit); err != nil {
			return nil, err
		}
	}
	return calls, err
}

func (w *wrapped) ExtendLease(ctx context.Context, callID, owner string, attempt int64, lease time.Duration) error {
	err := w.Store.ExtendLease(ctx, callID, owner, attempt, lease)
	// ErrCancelRequested: extended too, with news for the worker.
	if err == nil || errors.Is(err, store.ErrCancelRequested) {
		if ferr := Eval(LeaseAfterCommit); ferr != nil {
			return ferr
		}
	}
	return err
}

func (w *wrapped) Succeed(ctx context.Context, c store.Completion) (store.Call, error) {
	return afterCompletion(w.Store.Succeed(ctx, c))(SucceedAfterCommit)
}

func (w *wrapped) Fail(ctx context.Context, c store.Completion) (store.Call, error) {
	return afterCompletion(w.Store.Fail(ctx, c))(FailAfterCommit)
}

func (w *wrapped) ScheduleRetry(ctx context.Context, c store.Completion, delay time.Duration) (store.Call, error) {
	return afterCompletion(w.Store.ScheduleRetry(ctx, c, delay))(RetryAfterCommit)
}

// afterCompletion runs a completion's after-commit point when it committed.
func afterCompletion(c store.Call, err error) func(Name) (store.Call, error) {
	return func(n Name) (store.Call, error) {
		if err != nil {
			return c, err
		}
		if ferr := Eval(n); ferr != nil {
			return store.Call{}, ferr
		}
		return c, nil
	}
}

func (w *wrapped) RecoverExpired(ctx context.Context) ([]string, error) {
	ids, err := w.Store.RecoverExpired(ctx)
	if err == nil && len(ids) > 0 {
		if err := Eval(RecoverAfterCommit); err != nil {
			return nil, err
		}
	}
	return ids, err
}

func (w *wrapped) Release(ctx context.Context, callID, owner string, attempt int64, reason string) error {
	err := w.Store.Release(ctx, callID, owner, attempt, reason)
	if err == nil {
		return Eval(ReleaseAfterCommit)
	}
	return err
}

func (w *wrapped) Cancel(ctx context.Context, callID string, errJSON json.RawMessage) (store.Call, store.CancelOutcome, error) {
	c, out, err := w.Store.Cancel(ctx, callID, errJSON)
	if err == nil && out != store.AlreadyFinal {
		if err := Eval(CancelAfterCommit); err != nil {
			return store.Call{}, 0, err
		}
	}
	return c, out, err
}
