package server

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/idemctl/idemctl/internal/logkey"
	"github.com/idemctl/idemctl/internal/store"
)

// writeRetest is how long after the last failed write /readyz stays not
// ready when no write has been tried since (docs/operations.md, "Health
// and readiness"): long enough for a load balancer to take the instance
// out, short enough that an instance nobody sends writes to any more gets
// one again and so learns that the disk has space again.
const writeRetest = 5 * time.Second

// writeHealth is the one home of the rule "an instance whose database
// fails its writes is not ready". It learns the outcome of every write the
// server makes (healthStore), handlers and workers alike: a write that
// fails with store.ErrUnavailable (disk full, I/O error, lock busy past
// the busy timeout, connection lost) makes the instance not ready, until a
// write of the same kind is answered by the database (a success, a
// conflict, a fenced completion) or writeRetest passes without one. Per
// kind, because a disk can be full for one kind and not another: a claim
// rewrites rows in place and may succeed while every create, which needs
// new pages, fails. A ping only proves the database can be read; a full
// disk still reads fine.
type writeHealth struct {
	log *slog.Logger
	// retest is writeRetest (tests change it).
	retest time.Duration
	// failed[k] is when the last write of kind k failed (UnixNano), 0 if
	// none has since the last success of that kind.
	failed [numWriteKinds]atomic.Int64
}

// writeKind is a kind of write, as writeHealth tells them apart.
type writeKind int

// The kinds of write: one per write method of store.Store.
const (
	writeCreate writeKind = iota
	writeClaim
	writeSucceed
	writeFail
	writeRetry
	writeRecover
	writeRelease
	writeExtend
	writeCancel
	writePurge
	numWriteKinds
)

var writeKindNames = [numWriteKinds]string{"create", "claim", "succeed", "fail", "schedule retry", "recover", "release", "extend lease", "cancel", "purge"}

// note records the outcome of one write of kind k.
func (h *writeHealth) note(k writeKind, err error) {
	switch {
	case errors.Is(err, store.ErrUnavailable):
		if h.failed[k].Swap(time.Now().UnixNano()) == 0 {
			h.log.Warn("database write failed: not ready until this kind of write succeeds",
				"write", writeKindNames[k], logkey.Err, err)
		}
	case err != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
		// The caller gave up: says nothing about the database.
	default:
		if h.failed[k].Swap(0) != 0 {
			h.log.Info("database write succeeded again", "write", writeKindNames[k])
		}
	}
}

// ready reports whether the database takes writes, as far as the writes
// tell: no kind failed more recently than it succeeded, within retest.
func (h *writeHealth) ready() bool {
	for k := range h.failed {
		if at := h.failed[k].Load(); at != 0 && time.Since(time.Unix(0, at)) <= h.retest {
			return false
		}
	}
	return true
}

// healthStore is st with every write's outcome noted in h.
type healthStore struct {
	store.Store
	h *writeHealth
}

func (s *healthStore) CreateOrGet(ctx context.Context, n store.NewCall) (store.Call, store.Outcome, error) {
	c, out, err := s.Store.CreateOrGet(ctx, n)
	s.h.note(writeCreate, err)
	return c, out, err
}

func (s *healthStore) ClaimNext(ctx context.Context, owner string, lease time.Duration, limit int, quotas ...store.ToolQuota) ([]store.Call, error) {
	calls, err := s.Store.ClaimNext(ctx, owner, lease, limit, quotas...)
	s.h.note(writeClaim, err)
	return calls, err
}

func (s *healthStore) Succeed(ctx context.Context, c store.Completion) (store.Call, error) {
	call, err := s.Store.Succeed(ctx, c)
	s.h.note(writeSucceed, err)
	return call, err
}

func (s *healthStore) Fail(ctx context.Context, c store.Completion) (store.Call, error) {
	call, err := s.Store.Fail(ctx, c)
	s.h.note(writeFail, err)
	return call, err
}

func (s *healthStore) ScheduleRetry(ctx context.Context, c store.Completion, delay time.Duration) (store.Call, error) {
	call, err := s.Store.ScheduleRetry(ctx, c, delay)
	s.h.note(writeRetry, err)
	return call, err
}

func (s *healthStore) RecoverExpired(ctx context.Context) ([]string, error) {
	ids, err := s.Store.RecoverExpired(ctx)
	s.h.note(writeRecover, err)
	return ids, err
}

func (s *healthStore) Release(ctx context.Context, callID, owner string, attempt int64, reason string) error {
	err := s.Store.Release(ctx, callID, owner, attempt, reason)
	s.h.note(writeRelease, err)
	return err
}

func (s *healthStore) ExtendLease(ctx context.Context, callID, owner string, attempt int64, lease time.Duration) error {
	err := s.Store.ExtendLease(ctx, callID, owner, attempt, lease)
	s.h.note(writeExtend, err)
	return err
}

func (s *healthStore) Cancel(ctx context.Context, callID string, errJSON json.RawMessage) (store.Call, store.CancelOutcome, error) {
	c, out, err := s.Store.Cancel(ctx, callID, errJSON)
	s.h.note(writeCancel, err)
	return c, out, err
}

func (s *healthStore) Purge(ctx context.Context, olderThan time.Duration, limit int) (int, error) {
	n, err := s.Store.Purge(ctx, olderThan, limit)
	s.h.note(writePurge, err)
	return n, err
}
