package server

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/idemctl/idemctl/internal/callview"
	"github.com/idemctl/idemctl/internal/console"
	"github.com/idemctl/idemctl/internal/executor"
	"github.com/idemctl/idemctl/internal/logkey"
	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/telemetry"
	"github.com/idemctl/idemctl/internal/wire"
)

// waitRecheck is how often a held "Prefer: wait" request re-reads the call
// when no completion signal arrives: the call may be completed by another
// instance sharing the database.
const waitRecheck = 500 * time.Millisecond

// routes builds the mux. Each API path is registered twice: with its method
// (Go 1.22 patterns) and without, the latter answering 405 in JSON instead
// of the mux's text/plain; "/" answers 404 in JSON.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	route := func(method, path string, h http.HandlerFunc) {
		mux.HandleFunc(method+" "+path, h)
		allow := method
		if method == http.MethodGet {
			allow = "GET, HEAD" // GET patterns match HEAD too
		}
		mux.HandleFunc(path, s.methodNotAllowed(allow))
	}
	// Two methods on one path: registered by hand, with one 405 for both.
	mux.HandleFunc("POST "+wire.PathCalls, varyPrefer(s.handleCreate))
	mux.HandleFunc("GET "+wire.PathCalls, s.handleList)
	mux.HandleFunc(wire.PathCalls, s.methodNotAllowed("GET, HEAD, POST"))
	route(http.MethodGet, "/v1/tool-calls/{call_id}", varyPrefer(s.handleGet))
	mux.HandleFunc("/v1/tool-calls/{call_id}/{action...}", s.handleCallAction)
	// {key...}: a key may contain '/' (any visible ASCII).
	route(http.MethodGet, "/v1/tool-calls/by-key/{key...}", varyPrefer(s.handleGetByKey))
	route(http.MethodPost, wire.PathRedrive, s.handleRedrive)
	route(http.MethodGet, "/v1", s.handleService)
	route(http.MethodGet, wire.PathTools, s.handleTools)
	route(http.MethodGet, wire.PathOpenAPI, s.handleOpenAPI)
	route(http.MethodGet, wire.PathStats, s.handleStats)
	mux.Handle(wire.PathMCP, s.mcp) // the SDK answers its own methods (POST, GET, DELETE)
	route(http.MethodGet, wire.PathHealthz, s.handleHealthz)
	route(http.MethodGet, wire.PathReadyz, s.handleReadyz)
	route(http.MethodGet, wire.PathMetrics, promhttp.HandlerFor(s.m.reg, promhttp.HandlerOpts{
		ErrorLog: slogPrinter{s.log},
	}).ServeHTTP)
	if !s.cfg.NoUI {
		// The web console (docs/console.md) authenticates its own requests
		// (bearer header or its sign-in cookie; authenticate lets its paths
		// through) and cancels through the API's own cancel path.
		ui := console.New(console.Config{
			Store:        s.st,
			Authenticate: s.consoleAuth(),
			AuthFailed:   func(reason string) { s.m.authFailures.WithLabelValues(reason).Inc() },
			AuthLimit:    s.authLimit,
			HTTPS:        s.proxies.HTTPS,
			Cancel:       s.cancelCall,
			Gates:        s.consoleGates,
			ValidCallID:  isCallID,
			EncodeCursor: encodeCursor,
			DecodeCursor: decodeCursor,
			Logger:       s.log,
		})
		mux.Handle(console.Prefix, ui)
		mux.Handle(console.Prefix+"/", ui)
		mux.Handle(console.LegacyPrefix, ui)
	}
	mux.HandleFunc("/", s.handleNotFound)
	// authenticate is outermost: it hands on a copy of the request (with
	// the principal in its context), and instrument must see the copy the
	// mux sets the route pattern on. Its 401s are counted in
	// idemctl_auth_failures_total.
	return lingerUnread(s.traced(s.authenticate(s.instrument(s.recoverer(mux)))))
}

// varyPrefer marks every response of a route that honours "Prefer: wait"
// with Vary: Prefer — waited or not, success or error. The answer depends
// on that header (a held response shows a later state), so a cache must
// never give a request the answer stored for a request with another
// Prefer; a response without Vary would be taken as valid for both.
func varyPrefer(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Add(wire.HeaderVary, wire.HeaderPrefer)
		h(w, r)
	}
}

// handleCreate is POST /v1/tool-calls (docs/api.md, "Submitting a call"): validate everything,
// then record or find the call in one store transaction.
func (s *Server) handleCreate(w http.ResponseWriter, r *http.Request) {
	key, aerr := idempotencyKey(r.Header)
	if aerr != nil {
		writeAPIError(w, s.log, aerr)
		return
	}
	in, ok := s.readCreate(w, r, key)
	if !ok {
		return
	}
	// The body's bytes stay reserved until the answer is written: its
	// copies (parsed, canonical, stored, echoed) live until then.
	defer in.release()
	if in.cached != nil {
		s.respondCached(w, r, key, in.cached)
		return
	}
	req := in.req
	// idemctl mcp forwards an agent's calls over this API and says so; any
	// other value is the API's own door.
	if r.Header.Get(wire.HeaderVia) == store.ViaMCP {
		req.Via = store.ViaMCP
	}
	principal := principalOf(r.Context())
	call, outcome, aerr := s.submit(r.Context(), principal, key, req)
	if aerr != nil {
		writeAPIError(w, s.log, aerr)
		return
	}
	if outcome == store.Deduplicated {
		// Answered as a replay, and said why: the key itself was new
		// (docs/api.md, "Headers").
		w.Header().Set(wire.HeaderDeduplicatedBy, wire.DeduplicatedByIntent)
	}
	answer := s.respondCall(w, r, call, outcome != store.Created, true)
	if outcome == store.Existing {
		// What a replay of this body answers while the call stays as it
		// is: put keeps it only for a succeeded call (replaycache.go).
		s.replays.put(in.gen, principal, key, in.sum, call, answer)
	}
}

// posted is a POST body read by readCreate: the checked request, or, for
// the body of a replay the replay cache holds, its answer (cached) and
// no request.
type posted struct {
	req     createRequest
	cached  *replayEntry
	sum     [sha256.Size]byte // of the body's bytes
	gen     uint64            // the replay cache's generation before req was checked
	release func()
}

// readCreate reads and checks a POST body under a body slot
// (MaxConcurrentBodies); the slot is held while the body and its parsed
// form are in memory, and given back before the store is asked anything.
// Without a free slot it answers 503 overloaded before reading: the
// request stores nothing, so a retry with the same key is safe. ok false
// means the answer has been written. A body the replay cache knows for
// the principal's key is not parsed: its answer is returned instead.
func (s *Server) readCreate(w http.ResponseWriter, r *http.Request, key string) (in posted, ok bool) {
	if r.ContentLength > MaxBodyBytes {
		writeError(w, s.log, http.StatusRequestEntityTooLarge, wire.CodePayloadTooLarge,
			fmt.Sprintf("body is %d bytes; at most %d are accepted", r.ContentLength, MaxBodyBytes))
		return in, false
	}
	// The byte budget (MaxBodyBytesInFlight) is taken for the declared
	// length, or the most a body may be when it is not declared.
	weight := r.ContentLength
	if weight < 0 {
		weight = MaxBodyBytes
	}
	if !s.bodyBytes.take(weight) {
		s.m.limitRefusals.WithLabelValues(limitBodyBytes).Inc()
		w.Header().Set("Retry-After", "1")
		writeError(w, s.log, http.StatusServiceUnavailable, wire.CodeOverloaded,
			fmt.Sprintf("too many request body bytes in flight (at most %d); retry with the same key", s.bodyBytes.max))
		return in, false
	}
	give := sync.OnceFunc(func() { s.bodyBytes.give(weight) })
	defer func() {
		if !ok {
			give() // refused: the answer is written, nothing else holds the body
		}
	}()
	select {
	case s.bodySlots <- struct{}{}:
	default:
		s.m.limitRefusals.WithLabelValues(limitBodies).Inc()
		w.Header().Set(wire.HeaderRetryAfter, "1")
		writeError(w, s.log, http.StatusServiceUnavailable, wire.CodeOverloaded,
			fmt.Sprintf("too many requests being read at once (at most %d); retry with the same key", cap(s.bodySlots)))
		return in, false
	}
	s.m.bodiesInFlight.Inc()
	defer func() {
		<-s.bodySlots
		s.m.bodiesInFlight.Dec()
	}()

	body, err := readBody(http.MaxBytesReader(w, r.Body, MaxBodyBytes), r.ContentLength)
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeError(w, s.log, http.StatusRequestEntityTooLarge, wire.CodePayloadTooLarge,
				fmt.Sprintf("body exceeds %d bytes", MaxBodyBytes))
			return in, false
		}
		s.bodyReadError(w, r, err)
		return in, false
	}
	principal := principalOf(r.Context())
	in.release = give
	if s.replays != nil {
		in.sum = sha256.Sum256(body)
		if in.cached = s.replays.get(principal, key, in.sum); in.cached != nil {
			return in, true
		}
		in.gen = s.replays.generation() // before the registry is asked
	}
	req, aerr := parseCreate(body, s.cfg.Chaos, s.cfg.Tools, principal)
	if aerr != nil {
		writeAPIError(w, s.log, aerr)
		return in, false
	}
	in.req = req
	return in, true
}

// submit is the create-or-get path of every door (POST /v1/tool-calls,
// the MCP tools/call): back-pressure, then record or find the call of
// principal's key in one store transaction (docs/lifecycle.md, "Create or
// get"), with its metrics, log line and executor wake-up. req has been
// checked completely (parseCreate, checkToolCall). A refusal stores
// nothing; a conflict carries the call the key names.
func (s *Server) submit(ctx context.Context, principal, key string, req createRequest) (store.Call, store.Outcome, *apiError) {
	if aerr := s.notifyURL(principal, &req); aerr != nil {
		return store.Call{}, 0, aerr
	}
	full := s.queueFull()
	principalFull := !full && s.pendingOf.full(ctx, principal)
	if full || principalFull {
		if aerr := s.refuseNewKey(ctx, principal, key, principalFull); aerr != nil {
			return store.Call{}, 0, aerr
		}
	}
	if open, left := s.exec.FailFast(req.Tool); open {
		if aerr := s.refuseCircuitOpen(ctx, principal, key, req.Tool, left); aerr != nil {
			return store.Call{}, 0, aerr
		}
	}
	// Claim at creation (docs/lifecycle.md, "Claim at creation"): with a
	// worker free here, the create claims the call it makes, which then
	// starts at once without the scheduler's claim. The slot goes back
	// unless a call was created and started on it.
	var res *executor.Reservation
	if !s.cfg.NoClaimAtCreate {
		res, _ = s.exec.Reserve(req.Tool)
	}
	defer res.Release()
	call, outcome, err := s.createOrGet(ctx, principal, key, req, res.Claim())
	switch {
	case errors.Is(err, store.ErrConflict):
		s.m.calls.WithLabelValues(callsConflict).Inc()
		aerr := &apiError{status: http.StatusConflict, code: wire.CodeIdempotencyConflict,
			message: "idempotency key already used with a different request (same key, different fingerprint)"}
		var ce *store.ConflictError
		if errors.As(err, &ce) {
			aerr.callID = ce.CallID // the call the key names, for the client to read
		}
		s.log.Info("idempotency conflict: same key, different fingerprint",
			logkey.Key, key, logkey.Tool, req.Tool, logkey.CallID, aerr.callID, logkey.Principal, principal)
		return store.Call{}, 0, aerr
	case errors.Is(err, store.ErrKeyExpired):
		s.m.calls.WithLabelValues(callsExpired).Inc()
		aerr := keyExpired(err)
		s.log.Info("idempotency key expired: its call was purged",
			logkey.Key, key, logkey.Tool, req.Tool, logkey.CallID, aerr.callID, logkey.Principal, principal)
		return store.Call{}, 0, aerr
	case err != nil:
		return store.Call{}, 0, s.submitStoreError(ctx, err, key)
	}
	switch outcome {
	case store.Created:
		s.m.calls.WithLabelValues(callsCreated).Inc()
	case store.RetryReset:
		s.m.calls.WithLabelValues(callsRetryReset).Inc()
	case store.Deduplicated:
		s.m.calls.WithLabelValues(callsDeduplicated).Inc()
	default:
		s.m.calls.WithLabelValues(callsReplayed).Inc()
	}
	// Debug, not info: one line per request costs about a tenth of the
	// accepted rate (measured with scripts/perf); idemctl_calls_total counts them.
	if s.log.Enabled(ctx, slog.LevelDebug) { // the arguments cost allocations even when off
		s.log.Debug("tool call "+outcome.String(), logkey.CallID, call.CallID, logkey.Key, key,
			logkey.Tool, call.Tool, logkey.Status, call.Status, logkey.Principal, principal)
	}
	noteCall(ctx, call, outcome)
	if outcome == store.Created && res.Start(call) {
		return call, outcome, nil // running here already: not pending, nothing to wake
	}
	if outcome == store.Created || outcome == store.RetryReset {
		s.exec.Added()
		s.pendingOf.added(principal)
		s.exec.Wake() // start now, not at the next tick
	}
	return call, outcome, nil
}

// notifyURL checks req's notify_url against the allow-list (422
// notify_url_not_allowed, nothing stored), or gives req principal's
// default endpoint when it names none (checked at start).
func (s *Server) notifyURL(principal string, req *createRequest) *apiError {
	allow := s.cfg.Webhooks.Allow
	if req.NotifyURL == nil {
		req.NotifyURL = allow.Default(principal)
		return nil
	}
	if err := allow.Check(*req.NotifyURL); err != nil {
		return &apiError{status: http.StatusUnprocessableEntity, code: wire.CodeNotifyURLNotAllowed, message: err.Error()}
	}
	return nil
}

// keyExpired is the 410 of a key whose call retention purged (err wraps
// a *store.ExpiredError): the purged call's id and the purge time.
func keyExpired(err error) *apiError {
	aerr := &apiError{status: http.StatusGone, code: wire.CodeIdempotencyKeyExpired,
		message: "idempotency key expired: its call was purged by retention and is not run again; use a new key for a new call"}
	var ee *store.ExpiredError
	if errors.As(err, &ee) {
		aerr.callID = ee.Tombstone.CallID
		at := ee.Tombstone.PurgedAt
		aerr.purgedAt = &at
	}
	return aerr
}

// createOrGet is the store's CreateOrGet with a fresh call id, tried once
// more with another id if the first one was already taken by another call
// (newCallID: rare, and the store wrote nothing for the refused insert).
// claim, if set, claims a call the key creates (store.NewCall.Claim).
func (s *Server) createOrGet(ctx context.Context, principal, key string, req createRequest, claim *store.CreateClaim) (store.Call, store.Outcome, error) {
	for try := 0; ; try++ {
		callID, err := s.newCallID()
		if err != nil {
			return store.Call{}, 0, err
		}
		n := req.newCall(callID, principal, key)
		n.TombstoneRetention = s.cfg.TombstoneRetention
		n.TraceParent = telemetry.TraceParent(ctx) // the attempts continue this request's trace
		n.Claim = claim
		call, outcome, err := s.st.CreateOrGet(ctx, n)
		// An unavailable database says nothing about the id, and asking
		// it again would only double the wait.
		if err == nil || errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrKeyExpired) ||
			errors.Is(err, store.ErrUnavailable) || try > 0 || !s.idTaken(ctx, callID, principal, key) {
			return call, outcome, err
		}
		s.log.Warn("call id already taken, retrying with a fresh one", logkey.CallID, callID, logkey.Key, key)
	}
}

// idTaken reports whether callID names a call of another key: the reason
// a create with that id failed.
func (s *Server) idTaken(ctx context.Context, callID, principal, key string) bool {
	c, err := s.st.GetAny(ctx, callID) // any principal's: ids are global
	return err == nil && (c.Principal != principal || c.IdemKey != key)
}

// submitStoreError maps a store error of submit as storeError does: unavailable
// → 503 (the caller adds Retry-After), anything else → 500, logged.
func (s *Server) submitStoreError(ctx context.Context, err error, key string) *apiError {
	switch {
	case errors.Is(err, store.ErrUnavailable):
		s.log.Warn("database unavailable", logkey.Key, key, logkey.Err, err)
		return &apiError{status: http.StatusServiceUnavailable, code: wire.CodeUnavailable,
			message: "database unavailable, retry with the same key"}
	case ctx.Err() != nil:
		return &apiError{status: http.StatusServiceUnavailable, code: wire.CodeUnavailable, message: "request cancelled"}
	}
	s.log.Error("internal error", logkey.Key, key, logkey.Err, err)
	return &apiError{status: http.StatusInternalServerError, code: wire.CodeInternal, message: "internal error"}
}

// refuseNewKey is the back-pressure of a full queue (Config.MaxPending):
// a key never recorded is refused with 503 overloaded (Retry-After),
// storing nothing, so the client's retry with the same key is safe. A key
// already recorded is served as always (a replay, a retry reset): it adds
// nothing to the queue a client is not already owed. nil means go on.
//
// principalFull says the refusal is for principal's own limit
// (MaxPendingPerPrincipal), not for the whole queue's.
func (s *Server) refuseNewKey(ctx context.Context, principal, key string, principalFull bool) *apiError {
	_, err := s.st.GetByKey(ctx, principal, key)
	switch {
	case err == nil:
		return nil
	case !errors.Is(err, store.ErrNotFound):
		return s.submitStoreError(ctx, err, key)
	}
	if principalFull {
		s.m.limitRefusals.WithLabelValues(limitPendingPrincipal).Inc()
		s.refused.Add(1)
		s.log.Info("new key refused: too many calls pending for this principal", logkey.Key, key, logkey.Principal, principal,
			"max_pending_per_principal", s.pendingOf.limit)
		return &apiError{status: http.StatusServiceUnavailable, code: wire.CodeOverloaded,
			message: fmt.Sprintf("too many calls pending for this principal (at most %d); nothing was recorded, retry with the same key", s.pendingOf.limit)}
	}
	s.m.limitRefusals.WithLabelValues(limitPending).Inc()
	s.refused.Add(1)
	s.log.Info("new key refused: too many calls pending", logkey.Key, key,
		"pending", s.exec.Pending(), "max_pending", s.maxPending)
	return &apiError{status: http.StatusServiceUnavailable, code: wire.CodeOverloaded,
		message: fmt.Sprintf("too many calls pending (at most %d); nothing was recorded, retry with the same key", s.maxPending)}
}

// queueFull reports whether a new key must be refused: a limit is set and
// at least that many calls are pending, by the executor's estimate (it
// costs no query; see executor.Executor.Pending for how exact it is).
func (s *Server) queueFull() bool {
	return s.maxPending > 0 && s.exec.Pending() >= s.maxPending
}

// bodyReadError answers a request whose body could not be read. The
// message never includes err's text: a network error names both ends'
// addresses ("read tcp 127.0.0.1:8081->10.0.0.7:51234: i/o timeout"), which
// a client has no use for. Nothing was recorded, so a retry with the same
// key is always safe.
func (s *Server) bodyReadError(w http.ResponseWriter, r *http.Request, err error) {
	s.log.Info("reading request body failed", logkey.Method, r.Method, logkey.Path, r.URL.Path, logkey.Err, err)
	var ne net.Error
	if errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		// The server's read timeout ran out mid-body: 408 (RFC 9110
		// §15.5.9), with the stable code bad_request (docs/api.md,
		// "Errors": the codes are fixed). net/http closes the connection after it anyway; saying so
		// keeps the client from sending its next request on it.
		w.Header().Set("Connection", "close")
		writeError(w, s.log, http.StatusRequestTimeout, wire.CodeBadRequest,
			"request body not received in time")
		return
	}
	msg := "request body could not be read"
	if errors.Is(err, io.ErrUnexpectedEOF) {
		msg = "request body ended before its Content-Length"
	}
	writeError(w, s.log, http.StatusBadRequest, wire.CodeBadRequest, msg)
}

// handleGet is GET /v1/tool-calls/{call_id}.
func (s *Server) handleGet(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("call_id")
	if !isCallID(id) {
		writeError(w, s.log, http.StatusNotFound, wire.CodeNotFound, "no call with id "+strconv.Quote(id))
		return
	}
	// Another principal's call is the same 404 as an unknown id (Store.Get),
	// so ids cannot be probed.
	call, err := s.st.Get(r.Context(), principalOf(r.Context()), id)
	if errors.Is(err, store.ErrNotFound) {
		writeError(w, s.log, http.StatusNotFound, wire.CodeNotFound, "no call with id "+strconv.Quote(id))
		return
	}
	if err != nil {
		s.storeError(w, r, err, logkey.CallID, id)
		return
	}
	s.respondCall(w, r, call, false, false)
}

// handleGetByKey is GET /v1/tool-calls/by-key/{key} (docs/api.md, "Reading
// a call": for a client that never saw a call_id). 404 means the key was never recorded: resend the
// POST with the same key.
func (s *Server) handleGetByKey(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")
	if checkKey(key) != nil {
		// Never recordable (empty, too long, not visible ASCII), so never
		// recorded; and the store is not asked to compare bytes it may
		// refuse (PostgreSQL: NUL, invalid UTF-8).
		writeError(w, s.log, http.StatusNotFound, wire.CodeNotFound, "no call with idempotency key "+strconv.Quote(key))
		return
	}
	call, err := s.st.GetByKey(r.Context(), principalOf(r.Context()), key)
	if errors.Is(err, store.ErrNotFound) {
		s.keyNotFound(w, r, key)
		return
	}
	if err != nil {
		s.storeError(w, r, err, logkey.Key, key)
		return
	}
	s.respondCall(w, r, call, false, false)
}

// keyNotFound answers GET by key for a key no call holds: 410 with the
// key's tombstone while a POST with it would get 410 too, else 404.
func (s *Server) keyNotFound(w http.ResponseWriter, r *http.Request, key string) {
	if s.cfg.TombstoneRetention > 0 {
		t, err := s.st.Tombstone(r.Context(), principalOf(r.Context()), key)
		switch {
		// This host's clock stands in for the database's (the create
		// path compares by the latter): they differ by the clock skew
		// at most, against a retention of days.
		case err == nil && t.PurgedAt >= float64(time.Now().Unix())-s.cfg.TombstoneRetention.Seconds():
			writeAPIError(w, s.log, keyExpired(&store.ExpiredError{Tombstone: t}))
			return
		case err != nil && !errors.Is(err, store.ErrNotFound):
			s.storeError(w, r, err, logkey.Key, key)
			return
		}
	}
	writeError(w, s.log, http.StatusNotFound, wire.CodeNotFound, "no call with idempotency key "+strconv.Quote(key))
}

// respondCall answers with a call, first holding the response under
// "Prefer: wait=N" until the call is final or N seconds pass. POST answers
// 200 for a final call and 202 otherwise; GET always 200. replayed marks a
// response that returns an already existing call (Idempotent-Replayed).
// It returns the body as sent, the call object's JSON and a newline (nil
// if it could not be encoded).
func (s *Server) respondCall(w http.ResponseWriter, r *http.Request, call store.Call, replayed, isPost bool) []byte {
	if wait, ok := preferWait(r.Header, s.cfg.MaxWait); ok {
		applied := true
		if !call.Status.Final() {
			call, applied = s.holdWait(r.Context(), call, wait)
		}
		if applied {
			preferenceApplied(w.Header(), wait)
		}
	}
	status := callHeaders(w.Header(), call.CallID, call.Status.Final(), replayed, isPost)
	body, err := marshalJSON(callview.Of(call))
	if err != nil {
		writeJSON(w, s.log, status, callview.Of(call)) // the 500 of a value that cannot be encoded
		return nil
	}
	body = append(body, '\n')
	writeBody(w, status, body)
	return body
}

// respondCached answers a POST from the replay cache: what respondCall
// answers a replay of a succeeded call (final, so a wait is applied at
// once), with the same metrics, log line and span attributes as submit's.
func (s *Server) respondCached(w http.ResponseWriter, r *http.Request, key string, e *replayEntry) {
	s.m.calls.WithLabelValues(callsReplayed).Inc()
	s.m.replayHits.Inc()
	if s.log.Enabled(r.Context(), slog.LevelDebug) {
		s.log.Debug("tool call "+store.Existing.String(), logkey.CallID, e.callID, logkey.Key, key,
			logkey.Tool, e.tool, logkey.Status, store.StatusSucceeded, logkey.Principal, principalOf(r.Context()))
	}
	noteCall(r.Context(), store.Call{CallID: e.callID, Tool: e.tool}, store.Existing)
	if wait, ok := preferWait(r.Header, s.cfg.MaxWait); ok {
		preferenceApplied(w.Header(), wait)
	}
	writeBody(w, callHeaders(w.Header(), e.callID, true, true, true), e.answer)
}

// preferenceApplied says a "Prefer: wait" was honoured.
func preferenceApplied(h http.Header, wait time.Duration) {
	h.Set(wire.HeaderPreferenceApplied, wire.PreferWait+"="+strconv.Itoa(int(wait/time.Second)))
}

// callHeaders sets the headers of an answer with a call and returns its
// status (respondCall).
func callHeaders(h http.Header, callID string, final, replayed, isPost bool) int {
	h.Set(wire.HeaderLocation, wire.CallPath(callID))
	if replayed {
		h.Set(wire.HeaderIdempotentReplayed, wire.ReplayedTrue)
	}
	if final {
		return http.StatusOK
	}
	h.Set(wire.HeaderRetryAfter, "1") // poll again in a second (or use Prefer: wait)
	if isPost {
		return http.StatusAccepted // accepted, not done
	}
	return http.StatusOK
}

// holdWait runs waitFinal under a wait slot (MaxHeldWaits). Without a free
// slot it does not wait: the call is returned as it is and applied is
// false, so the response goes out at once without Preference-Applied.
func (s *Server) holdWait(ctx context.Context, call store.Call, d time.Duration) (store.Call, bool) {
	if !s.waitsOf.take(call.Principal) {
		s.m.limitRefusals.WithLabelValues(limitWaitsPrincipal).Inc()
		return call, false
	}
	defer s.waitsOf.give(call.Principal)
	select {
	case s.waitSlots <- struct{}{}:
	default:
		s.m.limitRefusals.WithLabelValues(limitWaits).Inc()
		return call, false
	}
	s.m.waitsHeld.Inc()
	defer func() {
		<-s.waitSlots
		s.m.waitsHeld.Dec()
	}()
	return s.waitFinal(ctx, call, d), true
}

// waitFinal waits until call is final, d has passed, the client left or
// the server stops, and returns the call's latest state. The executor's
// completion signal makes it prompt; a slow re-read covers completions by
// other instances.
func (s *Server) waitFinal(ctx context.Context, call store.Call, d time.Duration) store.Call {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	recheck := time.NewTicker(waitRecheck)
	defer recheck.Stop()
	for {
		// Subscribe before reading, so a completion in between is not lost.
		done, release := s.waiters.subscribe(call.CallID)
		if c, err := s.st.Get(ctx, call.Principal, call.CallID); err == nil {
			call = c
		}
		if call.Status.Final() {
			release()
			return call
		}
		select {
		case <-done:
		case <-recheck.C:
		case <-deadline.C:
			release()
			return call
		case <-ctx.Done():
			release()
			return call
		case <-s.closing:
			release()
			return call
		}
		release()
	}
}

// handleStats is GET /stats: logical calls against side effects
// (docs/api.md, "Health, stats and metrics").
func (s *Server) handleStats(w http.ResponseWriter, r *http.Request) {
	st, err := s.st.Stats(r.Context())
	if err != nil {
		s.storeError(w, r, err)
		return
	}
	by := map[store.Status]int64{}
	for _, status := range store.Statuses {
		by[status] = st.ByStatus[status] // all four, zeros included
	}
	q, err := s.st.Queue(r.Context())
	if err != nil {
		s.storeError(w, r, err)
		return
	}
	writeJSON(w, s.log, http.StatusOK, wire.Stats{Calls: st.Calls, Effects: st.Effects, ByStatus: by,
		Queue: &wire.Queue{
			Depth:                   q.Pending,
			OldestPendingAgeSeconds: q.OldestPendingAge.Seconds(),
			MaxPending:              s.maxPending,
			Refused:                 s.refused.Load(),
		}})
}

// handleHealthz is GET /healthz: the process is up.
func (s *Server) handleHealthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, s.log, http.StatusOK, wire.Health{Status: wire.HealthOK})
}

// handleReadyz is GET /readyz: the server is not stopping, its writes
// are not failing (writehealth.go), and the database answers.
func (s *Server) handleReadyz(w http.ResponseWriter, r *http.Request) {
	select {
	case <-s.closing:
		w.Header().Set(wire.HeaderRetryAfter, "1")
		writeError(w, s.log, http.StatusServiceUnavailable, wire.CodeUnavailable, "shutting down")
		return
	default:
	}
	if !s.health.ready() {
		w.Header().Set(wire.HeaderRetryAfter, "1")
		writeError(w, s.log, http.StatusServiceUnavailable, wire.CodeUnavailable, "database writes failing")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := s.st.Ping(ctx); err != nil {
		w.Header().Set(wire.HeaderRetryAfter, "1")
		// The error is logged, not sent: a driver's message names the
		// database's address (and may quote its DSN).
		s.log.Warn("readiness check: database unreachable", logkey.Err, err)
		writeError(w, s.log, http.StatusServiceUnavailable, wire.CodeUnavailable, "database unreachable")
		return
	}
	writeJSON(w, s.log, http.StatusOK, wire.Health{Status: wire.HealthOK})
}

func (s *Server) handleNotFound(w http.ResponseWriter, r *http.Request) {
	writeError(w, s.log, http.StatusNotFound, wire.CodeNotFound, "no route for "+r.Method+" "+r.URL.Path)
}

func (s *Server) methodNotAllowed(allow string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(wire.HeaderAllow, allow)
		writeError(w, s.log, http.StatusMethodNotAllowed, wire.CodeMethodNotAllowed,
			fmt.Sprintf("method %s not allowed on %s (allowed: %s)", r.Method, r.URL.Path, allow))
	}
}

// storeError maps a store error: unavailable → 503 with Retry-After, a
// client that left → nothing useful to say, anything else → 500, logged.
func (s *Server) storeError(w http.ResponseWriter, r *http.Request, err error, attrs ...any) {
	switch {
	case errors.Is(err, store.ErrUnavailable):
		s.log.Warn("database unavailable", append(attrs, logkey.Err, err)...)
		w.Header().Set(wire.HeaderRetryAfter, "1")
		writeError(w, s.log, http.StatusServiceUnavailable, wire.CodeUnavailable, "database unavailable, retry with the same key")
	case r.Context().Err() != nil:
		// The client is gone; whatever we write goes nowhere.
		writeError(w, s.log, http.StatusServiceUnavailable, wire.CodeUnavailable, "request cancelled")
	default:
		s.internalError(w, r, err, attrs...)
	}
}

// internalError logs err and answers 500 internal without details.
func (s *Server) internalError(w http.ResponseWriter, r *http.Request, err error, attrs ...any) {
	s.log.Error("internal error", append(attrs, logkey.Method, r.Method, logkey.Path, r.URL.Path, logkey.Err, err)...)
	writeError(w, s.log, http.StatusInternalServerError, wire.CodeInternal, "internal error")
}

// newCallID returns "c_" + 16 lowercase hex digits: 8 of time, 8 from
// crypto/rand (docs/api.md, "The call"). The time part is the creation time
// in units of 2^22 ns (about 4 ms), modulo 2^32 (it wraps every 208 days), so calls created one
// after another get ids that sort together. Every index keyed by call_id
// (the calls table's own, the audit's, the effects') then takes its inserts
// at one place instead of at a random page: on a large SQLite file a random
// page is a cache miss and a WAL frame per insert.
//
// Two calls created within the same 4 ms share the time part, so 32
// bits are left to tell them apart: at 5,000 new calls a second about one
// pair a day collides. submit notices (the store refuses the second id)
// and tries again with a fresh id, so a collision costs a retry, never a
// wrong answer.
func newCallID() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[4:]); err != nil {
		return "", fmt.Errorf("call id: %w", err)
	}
	binary.BigEndian.PutUint32(b[:4], uint32(time.Now().UnixNano()>>22))
	return "c_" + hex.EncodeToString(b[:]), nil
}

// readBody reads a body of declared length size (-1: unknown) into one
// buffer of that size: io.ReadAll would grow its buffer by doubling, and
// allocate about twice a large body's size on the way.
func readBody(rd io.Reader, size int64) ([]byte, error) {
	if size <= 0 {
		return io.ReadAll(rd)
	}
	buf := bytes.NewBuffer(make([]byte, 0, size+bytes.MinRead)) // ReadFrom wants MinRead free to read EOF
	_, err := buf.ReadFrom(rd)
	return buf.Bytes(), err
}
