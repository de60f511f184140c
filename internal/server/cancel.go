package server

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/tool"
)

// codeCanceled is the error code of a call stopped by a cancel request;
// codeAlreadyFinal answers a cancel of a call that had already ended.
const (
	codeCanceled     = "canceled"
	codeAlreadyFinal = "already_final"
)

// canceledError is the error stored on a canceled call. Not retryable: a
// same-key request returns the canceled call, it does not run it again.
var canceledError = &tool.ToolError{Code: codeCanceled, Message: "canceled by request", Retryable: false}

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

// handleCallAction serves /v1/tool-calls/{call_id}/{action}: only
// "cancel", by POST. (One pattern with a wildcard action, because a
// literal ".../{call_id}/cancel" would overlap ".../by-key/{key...}" in
// the mux.)
func (s *Server) handleCallAction(w http.ResponseWriter, r *http.Request) {
	if r.PathValue("action") != "cancel" {
		s.handleNotFound(w, r)
		return
	}
	if r.Method != http.MethodPost {
		s.methodNotAllowed(http.MethodPost)(w, r)
		return
	}
	s.handleCancel(w, r)
}

// handleCancel is POST /v1/tool-calls/{call_id}/cancel (docs/api.md,
// "Canceling a call"): a pending call is failed canceled at once (200), a
// running one is asked to stop (202; its tool's context is cancelled at
// once when it runs in this process), a final one is 409 already_final
// with the call. Another principal's call is 404, as for a read.
func (s *Server) handleCancel(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("call_id")
	call, out, err := s.cancelCall(r.Context(), principalOf(r.Context()), id)
	if errors.Is(err, store.ErrNotFound) {
		writeError(w, s.log, http.StatusNotFound, codeNotFound, "no call with id "+strconv.Quote(id))
		return
	}
	if err != nil {
		s.storeError(w, r, err, attrCallID, id)
		return
	}
	switch out {
	case store.Canceled:
		writeJSON(w, s.log, http.StatusOK, viewOf(call))
	case store.CancelRequested:
		w.Header().Set("Location", CallPath(id))
		w.Header().Set("Retry-After", "1")
		writeJSON(w, s.log, http.StatusAccepted, viewOf(call))
	default:
		v := viewOf(call)
		writeJSON(w, s.log, http.StatusConflict, ErrorBody{
			Error: ErrorDetail{Code: codeAlreadyFinal, Message: "the call is already " + string(call.Status), CallID: id},
			Call:  &v,
		})
	}
}

// cancelCall is the one cancel path, for the API and the console: a
// malformed id, an unknown call and another principal's call are all
// store.ErrNotFound, checked before anything changes; a pending call is
// failed canceled, a running one asked to stop (its tool's context is
// cancelled at once when it runs in this process).
func (s *Server) cancelCall(ctx context.Context, principal, id string) (store.Call, store.CancelOutcome, error) {
	if !isCallID(id) {
		return store.Call{}, 0, store.ErrNotFound
	}
	cur, err := s.st.Get(ctx, id)
	if err == nil && cur.Principal != principal {
		err = store.ErrNotFound
	}
	if err != nil {
		return store.Call{}, 0, err
	}
	errJSON, err := marshalJSON(canceledError)
	if err != nil {
		return store.Call{}, 0, err
	}
	call, out, err := s.st.Cancel(ctx, id, errJSON)
	if err != nil {
		return store.Call{}, 0, err // ErrNotFound: purged meanwhile
	}
	switch out {
	case store.Canceled:
		s.log.Info("call canceled", attrCallID, id, attrKey, call.IdemKey, attrPrincipal, principal)
		s.waiters.notify(id)
	case store.CancelRequested:
		if call.Owner != nil && *call.Owner == s.owner {
			s.exec.running.cancel(id)
		}
		s.log.Info("call cancel requested", attrCallID, id, attrKey, call.IdemKey, attrPrincipal, principal)
	}
	return call, out, nil
}
