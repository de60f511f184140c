package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/idemctl/idemctl/internal/callview"
	"github.com/idemctl/idemctl/internal/logkey"
	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/tool"
	"github.com/idemctl/idemctl/internal/wire"
)

// handleResolve is POST /v1/tool-calls/{call_id}/resolve (docs/api.md,
// "Resolving an unknown outcome"): an operator settles a failed
// outcome_unknown call as succeeded (with a result, and its effect row) or
// failed (not retryable). The only way a final call ever changes.
// Any other call is 409 not_resolvable and nothing changes; another
// principal's call is 404, as for a read.
func (s *Server) handleResolve(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("call_id")
	limit := int64(s.cfg.MaxResultBytes) + 4<<10 // the result and a short message
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeError(w, s.log, http.StatusRequestEntityTooLarge, wire.CodePayloadTooLarge,
				fmt.Sprintf("body exceeds %d bytes", limit))
			return
		}
		s.bodyReadError(w, r, err)
		return
	}
	var req wire.Resolve
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil || dec.More() {
		writeError(w, s.log, http.StatusBadRequest, wire.CodeBadRequest,
			`body must be one JSON object: {"outcome": "succeeded", "result": …} or {"outcome": "failed", "message": "…"}`)
		return
	}
	if err := checkResolve(req, s.cfg.MaxResultBytes); err != nil {
		writeError(w, s.log, http.StatusBadRequest, wire.CodeBadRequest, err.Error())
		return
	}
	call, err := s.resolveCall(r.Context(), principalOf(r.Context()), id, req)
	switch {
	case errors.Is(err, store.ErrNotFound):
		writeError(w, s.log, http.StatusNotFound, wire.CodeNotFound, "no call with id "+strconv.Quote(id))
	case errors.Is(err, store.ErrNotResolvable):
		v := callview.Of(call)
		writeJSON(w, s.log, http.StatusConflict, wire.Error{
			Error: wire.ErrorDetail{Code: wire.CodeNotResolvable, CallID: id,
				Message: fmt.Sprintf("%v; this one is %s%s", store.ErrNotResolvable, call.Status, codeSuffix(call))},
			Call: &v,
		})
	case err != nil:
		s.storeError(w, r, err, logkey.CallID, id)
	default:
		writeJSON(w, s.log, http.StatusOK, callview.Of(call))
	}
}

// checkResolve refuses a body that does not say one outcome clearly.
func checkResolve(req wire.Resolve, maxResult int) error {
	switch req.Outcome {
	case wire.StatusSucceeded:
		if req.Message != "" {
			return errors.New(`message goes with outcome "failed"; a succeeded call has a result`)
		}
		if len(req.Result) > maxResult {
			return fmt.Errorf("result is %d bytes; this server stores at most %d", len(req.Result), maxResult)
		}
		if len(req.Result) > 0 && !isJSONObject(req.Result) {
			return errors.New("result must be a JSON object, as every tool's result is")
		}
	case wire.StatusFailed:
		if len(req.Result) > 0 {
			return errors.New(`result goes with outcome "succeeded"; a failed call has a message`)
		}
		if len(req.Message) > maxResolveMessage {
			return fmt.Errorf("message is at most %d bytes", maxResolveMessage)
		}
	default:
		return fmt.Errorf(`outcome must be "succeeded" or "failed", got %q`, req.Outcome)
	}
	return nil
}

// isJSONObject reports whether raw is a JSON object (null is not).
func isJSONObject(raw json.RawMessage) bool {
	var m map[string]json.RawMessage
	return json.Unmarshal(raw, &m) == nil && m != nil
}

// maxResolveMessage bounds a resolve's message: a note, not a document.
const maxResolveMessage = 1024

// codeSuffix is ", code C" for a failed call, "" otherwise.
func codeSuffix(c store.Call) string {
	if code := store.ErrorCode(c.ErrorJSON); code != "" {
		return " with code " + code
	}
	return ""
}

// resolveCall resolves principal's call id (store.ResolveCall): a
// malformed id, an unknown call and another principal's call are
// store.ErrNotFound, checked before anything changes.
func (s *Server) resolveCall(ctx context.Context, principal, id string, req wire.Resolve) (store.Call, error) {
	if !isCallID(id) {
		return store.Call{}, store.ErrNotFound
	}
	c, err := s.st.Get(ctx, principal, id)
	if err != nil {
		return store.Call{}, err
	}
	done, err := store.ResolveCall(ctx, s.st, c, principal, req, tool.EffectID(id))
	if err != nil {
		return done, err
	}
	s.log.Info("call resolved", logkey.CallID, id, logkey.Key, c.IdemKey, logkey.Principal, principal, logkey.Status, done.Status)
	s.waiters.notify(id)
	return done, nil
}
