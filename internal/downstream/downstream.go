// Package downstream is the demo downstream of docs/tools.md, "The demo
// downstream": a small HTTP service with a ledger of charges that honours
// Idempotency-Key the way a careful payment API does, so an http tool can
// be shown end to end: however often idemctl attempts a call, the ledger
// holds one charge. With IgnoreKeys it records every request instead, the
// contrast that shows why the key matters.
//
// A GET on a path reads the charges made on it the way a payment API's
// list and lookup routes do (for an http tool's lookup and reconcile
// blocks), and
// LoseAnswers stages the ambiguous failure those exist for: the charge is
// made, then the connection is dropped before the answer is written.
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
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
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

// Options configure a downstream (the flags of idemctl demo-downstream).
type Options struct {
	// IgnoreKeys records every request, repeats included.
	IgnoreKeys bool
	// LoseAnswers is the probability (0 to 1) that a charge, once made, is
	// answered by closing the connection instead: the client cannot know
	// whether it happened. Replays of a known key are answered normally.
	LoseAnswers float64
	// Seed seeds the draws of LoseAnswers, so a run can be repeated.
	Seed uint64
	// LoseLimit, if > 0, stops losing answers after that many (a scenario
	// that loses exactly the first answer sets LoseAnswers 1, LoseLimit 1).
	LoseLimit int
}

// Validate checks the options.
func (o Options) Validate() error {
	if !(o.LoseAnswers >= 0 && o.LoseAnswers <= 1) { // NaN fails both
		return fmt.Errorf("the probability of a lost answer must be from 0 to 1, got %v", o.LoseAnswers)
	}
	if o.LoseLimit < 0 {
		return fmt.Errorf("the limit of lost answers must be >= 0, got %d", o.LoseLimit)
	}
	return nil
}

// Server is the demo downstream. The zero value is not usable; use New.
type Server struct {
	opts Options

	mu      sync.Mutex
	charges []Charge
	byKey   map[string]answer
	rng     *rand.Rand
	lost    int
}

// New builds a downstream; ignoreKeys makes it record every request.
func New(ignoreKeys bool) *Server {
	s, _ := NewWith(Options{IgnoreKeys: ignoreKeys}) // valid options
	return s
}

// NewWith builds a downstream with opts, or refuses invalid ones.
func NewWith(opts Options) (*Server, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	return &Server{opts: opts, byKey: map[string]answer{},
		rng: rand.New(rand.NewPCG(opts.Seed, opts.Seed^0x9e3779b97f4a7c15))}, nil
}

// Lost returns how many answers were lost so far.
func (s *Server) Lost() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lost
}

// Ledger returns a copy of the charges, oldest first.
func (s *Server) Ledger() []Charge {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Charge(nil), s.charges...)
}

// Handler serves GET /ledger, GET on any other path (the list and lookup
// of the charges made on it) and POST/PUT/PATCH/DELETE on any path (each
// one a charge).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ledger", s.handleLedger)
	mux.HandleFunc("GET /", s.handleCharges)
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
		w.Header().Set(wire.HeaderAllow, "GET, POST, PUT, PATCH, DELETE")
		writeError(w, http.StatusMethodNotAllowed, wire.CodeMethodNotAllowed, "charges are made with POST, PUT, PATCH or DELETE and listed with GET; read the whole ledger with GET /ledger")
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
	if !s.opts.IgnoreKeys && key != "" {
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
	if !s.opts.IgnoreKeys && key != "" {
		s.byKey[key] = answer{bodyHash: hash, status: http.StatusCreated, body: out}
	}
	if s.loseNext() && loseAnswer(w) {
		s.lost++
		return
	}
	writeRaw(w, http.StatusCreated, out)
}

// loseNext draws whether the answer to the charge just made is lost. The
// caller holds s.mu: the draws happen in the order of the charges.
func (s *Server) loseNext() bool {
	if s.opts.LoseAnswers == 0 || (s.opts.LoseLimit > 0 && s.lost >= s.opts.LoseLimit) {
		return false
	}
	return s.rng.Float64() < s.opts.LoseAnswers
}

// loseAnswer closes the connection without writing an answer. It reports
// false when the connection cannot be taken over (HTTP/2), and then the
// answer is written as usual.
func loseAnswer(w http.ResponseWriter) bool {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return false
	}
	_ = conn.Close()
	return true
}

// PageSize is how many records one page of GET /charges holds by default;
// MaxPageSize caps its limit parameter.
const (
	PageSize    = 100
	MaxPageSize = 1000
)

// Page is one page of a list (GET /charges): the records made on the path
// at or after since, oldest first, and the URL of the next page ("" on the
// last).
type Page struct {
	Data []Charge `json:"data"`
	Next string   `json:"next,omitempty"`
}

// handleCharges is the list route of the charges made on the request's
// path (GET /charges?since=T, paged with limit and after) and, with
// idempotency_key=K, its lookup route: 200 with the first of them made
// with K, 404 when there is none.
func (s *Server) handleCharges(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if q.Has("idempotency_key") {
		key := q.Get("idempotency_key")
		for _, c := range s.Ledger() {
			if key != "" && c.Key == key && c.Path == r.URL.Path {
				writeJSON(w, http.StatusOK, c)
				return
			}
		}
		writeError(w, http.StatusNotFound, wire.CodeNotFound, "no charge was made with this Idempotency-Key")
		return
	}
	var since time.Time
	if v := q.Get("since"); v != "" {
		t, err := ParseSince(v)
		if err != nil {
			writeError(w, http.StatusBadRequest, wire.CodeBadRequest, err.Error())
			return
		}
		since = t
	}
	limit := PageSize
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxPageSize {
			writeError(w, http.StatusBadRequest, wire.CodeBadRequest, fmt.Sprintf("limit must be an integer from 1 to %d", MaxPageSize))
			return
		}
		limit = n
	}
	// after is how many ledger entries the previous pages covered: the
	// ledger only grows, so a position stays the same record.
	after := 0
	if v := q.Get("after"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			writeError(w, http.StatusBadRequest, wire.CodeBadRequest, "after must be the next link's position, an integer >= 0")
			return
		}
		after = n
	}
	ledger := s.Ledger()
	page := Page{Data: []Charge{}}
	for i := after; i < len(ledger); i++ {
		if ledger[i].Path != r.URL.Path || ledger[i].At.Before(since) {
			continue
		}
		if len(page.Data) == limit {
			next := url.Values{"after": {strconv.Itoa(i)}, "limit": {strconv.Itoa(limit)}}
			if q.Has("since") {
				next.Set("since", q.Get("since"))
			}
			page.Next = r.URL.Path + "?" + next.Encode()
			break
		}
		page.Data = append(page.Data, ledger[i])
	}
	writeJSON(w, http.StatusOK, page)
}

// ParseSince reads a since parameter: RFC 3339 or Unix seconds.
func ParseSince(v string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		return time.Unix(n, 0).UTC(), nil
	}
	return time.Time{}, fmt.Errorf("since must be an RFC 3339 time or Unix seconds, got %q", v)
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
