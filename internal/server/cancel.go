package server

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"github.com/idemctl/idemctl/internal/callview"
	"github.com/idemctl/idemctl/internal/executor"
	"github.com/idemctl/idemctl/internal/logkey"
	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/wire"
)

// codeAlreadyFinal answers a cancel of a call that had already ended.
const codeAlreadyFinal = "already_final"

// handleCallAction serves /v1/tool-calls/{call_id}/{action}: "cancel"
// and "resolve", by POST. (One pattern with a wildcard action, because a
// literal ".../{call_id}/cancel" would overlap ".../by-key/{key...}" in
// the mux.)
func (s *Server) handleCallAction(w http.ResponseWriter, r *http.Request) {
	action := r.PathValue("action")
	if action != wire.ActionCancel && action != wire.ActionResolve {
		s.handleNotFound(w, r)
		return
	}
	if r.Method != http.MethodPost {
		s.methodNotAllowed(http.MethodPost)(w, r)
		return
	}
	if action == wire.ActionResolve {
		s.handleResolve(w, r)
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
		writeError(w, s.log, http.StatusNotFound, wire.CodeNotFound, "no call with id "+strconv.Quote(id))
		return
	}
	if err != nil {
		s.storeError(w, r, err, logkey.CallID, id)
		return
	}
	switch out {
	case store.Canceled:
		writeJSON(w, s.log, http.StatusOK, callview.Of(call))
	case store.CancelRequested:
		w.Header().Set(wire.HeaderLocation, wire.CallPath(id))
		w.Header().Set(wire.HeaderRetryAfter, "1")
		writeJSON(w, s.log, http.StatusAccepted, callview.Of(call))
	default:
		v := callview.Of(call)
		writeJSON(w, s.log, http.StatusConflict, wire.Error{
			Error: wire.ErrorDetail{Code: wire.CodeAlreadyFinal, Message: "the call is already " + string(call.Status), CallID: id},
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
	cur, err := s.st.Get(ctx, principal, id)
	if err != nil {
		return store.Call{}, 0, err
	}
	errJSON, err := executor.CanceledErrorJSON()
	if err != nil {
		return store.Call{}, 0, err
	}
	// Written only if the cancel fails the call (it was pending): a
	// running call's delivery comes with the worker's completion.
	notify, err := store.DeliveryFor(cur)
	if err != nil {
		return store.Call{}, 0, err
	}
	call, out, err := s.st.Cancel(ctx, id, errJSON, notify)
	if err != nil {
		return store.Call{}, 0, err // ErrNotFound: purged meanwhile
	}
	switch out {
	case store.Canceled:
		s.log.Info("call canceled", logkey.CallID, id, logkey.Key, call.IdemKey, logkey.Principal, principal)
		s.onFinal(id)
	case store.CancelRequested:
		if call.Owner != nil && *call.Owner == s.exec.Owner() {
			s.exec.Cancel(id)
		}
		s.log.Info("call cancel requested", logkey.CallID, id, logkey.Key, call.IdemKey, logkey.Principal, principal)
	}
	return call, out, nil
}
