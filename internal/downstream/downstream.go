// Package downstream is the demo downstream of docs/tools.md, "The demo
// downstream": a small HTTP service with a ledger of charges that honours
// Idempotency-Key the way a careful payment API does, so an http tool can
// be shown end to end: however often idemctl attempts a call, the ledger
// holds one charge. With IgnoreKeys it records every request instead, the
// contrast that shows why the key matters.
//
// The ledger lives in memory: it is a demonstration, not a store.
package downstream

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/idemctl/idemctl/internal/wire"
)

// MaxBody caps a request body.
const MaxBody = 1 << 20

// Header names.
const (
	HeaderIdempotencyKey = wire.HeaderIdempotencyKey
	// HeaderReplayed is set on an answer repeated for a known key.
	HeaderReplayed = wire.HeaderIdempotentReplayed
)

// Charge is one ledger entry: one request that was performed.
type Charge struct {
	ID string `json:"id"`
	// Key is the request's Idempotency-Key ("" without one).
	Key string `json:"idempotency_key,omitempty"`
	// Path is the request path the charge was made on.
	Path string `json:"path"`
	// Request is the request body (JSON).
	Request json.RawMessage `json:"request"`
	At      time.Time       `json:"at"`
}

// answer is what was sent for a key, replayed on a repeat.
type answer struct {
	bodyHash [32]byte
	status   int
	body     []byte
}

// Server is the demo downstream. The zero value is not usable; use New.
type Server struct {
	ignoreKeys bool

	mu      sync.Mutex
	charges []Charge
	byKey   map[string]answer
}

// New builds a downstream; ignoreKeys makes it record every request.
func New(ignoreKeys bool) *Server {
	return &Server{ignoreKeys: ignoreKeys, byKey: map[string]answer{}}
}

// Ledger returns a copy of the charges, oldest first.
func (s *Server) Ledger() []Charge {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Charge(nil), s.charges...)
}

// Handler serves GET /ledger and POST/PUT/PATCH/DELETE on any other path
// (each one a charge).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ledger", s.handleLedger)
	mux.HandleFunc("/", s.handleCharge)
	return mux
}

func (s *Server) handleLedger(w http.ResponseWriter, _ *http.Request) {
	charges := s.Ledger()
	writeJSON(w, http.StatusOK, map[string]any{"count": len(charges), "charges": charges})
}

func (s *Server) handleCharge(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
	default:
		w.Header().Set(wire.HeaderAllow, "POST, PUT, PATCH, DELETE")
		writeError(w, http.StatusMethodNotAllowed, wire.CodeMethodNotAllowed, "charges are made with POST, PUT, PATCH or DELETE; read the ledger with GET /ledger")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeError(w, http.StatusRequestEntityTooLarge, wire.CodePayloadTooLarge, fmt.Sprintf("body exceeds %d bytes", MaxBody))
			return
		}
		writeError(w, http.StatusBadRequest, wire.CodeBadRequest, "reading the body failed")
		return
	}
	if !json.Valid(body) {
		writeError(w, http.StatusBadRequest, wire.CodeBadRequest, "the body must be JSON")
		return
	}
	var compact bytes.Buffer
	_ = json.Compact(&compact, body) // valid JSON compacts
	key := r.Header.Get(HeaderIdempotencyKey)
	hash := sha256.Sum256(append([]byte(r.Method+" "+r.URL.Path+"\n"), compact.Bytes()...))

	// One lock over check, record and answer: a repeat that arrives while
	// the first request is being handled waits and gets its answer.
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ignoreKeys && key != "" {
		if prev, ok := s.byKey[key]; ok {
			if prev.bodyHash != hash {
				writeError(w, http.StatusUnprocessableEntity, "idempotency_key_reused",
					"this Idempotency-Key was used with a different request")
				return
			}
			w.Header().Set(HeaderReplayed, "true")
			writeRaw(w, prev.status, prev.body)
			return
		}
	}
	c := Charge{ID: fmt.Sprintf("ch_%d", len(s.charges)+1), Key: key, Path: r.URL.Path,
		Request: compact.Bytes(), At: time.Now().UTC()}
	s.charges = append(s.charges, c)
	out, _ := json.Marshal(map[string]any{"id": c.ID, "charged": true, "request": c.Request})
	if !s.ignoreKeys && key != "" {
		s.byKey[key] = answer{bodyHash: hash, status: http.StatusCreated, body: out}
	}
	writeRaw(w, http.StatusCreated, out)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "encoding failed", http.StatusInternalServerError)
		return
	}
	writeRaw(w, status, b)
}

func writeRaw(w http.ResponseWriter, status int, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, wire.Error{Error: wire.ErrorDetail{Code: code, Message: msg}})
}
