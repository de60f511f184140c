package server

import (
	"context"
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
// server makes (note, as store.Observe's Done hook), handlers and workers alike: a write that
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
	failed [store.NumWrites]atomic.Int64
}

// note records the outcome of one write of kind k.
func (h *writeHealth) note(k store.Write, err error) {
	switch {
	case errors.Is(err, store.ErrUnavailable):
		if h.failed[k].Swap(time.Now().UnixNano()) == 0 {
			h.log.Warn("database write failed: not ready until this kind of write succeeds",
				"write", k.String(), logkey.Err, err)
		}
	case err != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
		// The caller gave up: says nothing about the database.
	default:
		if h.failed[k].Swap(0) != 0 {
			h.log.Info("database write succeeded again", "write", k.String())
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
