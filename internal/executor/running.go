package executor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/idemctl/idemctl/internal/tool"
	"github.com/idemctl/idemctl/internal/wire"
)

// canceledError is the error stored on a canceled call. Not retryable: a
// same-key request returns the canceled call, it does not run it again.
var canceledError = &tool.ToolError{Code: wire.CodeCanceled, Message: "canceled by request", Retryable: false}

// CanceledErrorJSON is the error object of a canceled call, as stored: the
// server records it on a pending call it cancels, the executor on a running
// one whose tool the cancel stopped.
func CanceledErrorJSON() (json.RawMessage, error) { return storedError(canceledError) }

// storedError encodes a tool error as it is stored, without HTML escaping:
// the server serves stored error objects as they are, and its own bodies
// leave "<", ">" and "&" unescaped too, so a message such as
// "amount must be >= 1" reads the same in both.
func storedError(e *tool.ToolError) (json.RawMessage, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(e); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil // Encode appends a newline
}

// errCanceledByRequest is the cause of a tool context cancelled by a
// cancel request (not by shutdown).
var errCanceledByRequest = errors.New("canceled by request")

// earlyCancelTTL is how long a cancel that found no running tool is kept
// for a tool about to start. The gap it covers, claim to tool start, is
// microseconds; a mark older than this belongs to a tool that had already
// finished (and is committing), and is dropped.
const earlyCancelTTL = time.Minute

// runningCalls is the executor's side of cancel: the tools running in this
// process, by call id, with the function that cancels each one's context.
// A cancel that arrives between the claim and the tool's start is kept
// (for earlyCancelTTL) and applied when the tool starts.
type runningCalls struct {
	mu      sync.Mutex
	cancels map[string]context.CancelCauseFunc
	early   map[string]time.Time // cancelled before track, and when
	now     func() time.Time
}

func newRunningCalls() *runningCalls {
	return &runningCalls{cancels: map[string]context.CancelCauseFunc{}, early: map[string]time.Time{}, now: time.Now}
}

// track returns the context a call's tool runs under and the function to
// call when it is done.
func (r *runningCalls) track(parent context.Context, callID string) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(parent)
	r.mu.Lock()
	r.cancels[callID] = cancel
	if at, ok := r.early[callID]; ok {
		delete(r.early, callID)
		if r.now().Sub(at) < earlyCancelTTL {
			cancel(errCanceledByRequest)
		}
	}
	r.mu.Unlock()
	return ctx, func() {
		r.mu.Lock()
		delete(r.cancels, callID)
		r.mu.Unlock()
		cancel(nil)
	}
}

// cancel cancels the tool of a call this process runs (or is about to).
func (r *runningCalls) cancel(callID string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.cancels[callID]; ok {
		c(errCanceledByRequest)
		return
	}
	now := r.now()
	for id, at := range r.early { // few: only cancels that raced a claim or a commit
		if now.Sub(at) >= earlyCancelTTL {
			delete(r.early, id)
		}
	}
	r.early[callID] = now
}

// canceledByRequest reports whether ctx, a tool's context from track, was
// cancelled by a cancel request.
func canceledByRequest(ctx context.Context) bool {
	return errors.Is(context.Cause(ctx), errCanceledByRequest)
}
