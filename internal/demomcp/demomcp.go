// Package demomcp is idemctl demo-mcp (docs/tools.md, "The demo MCP
// server"): a small MCP server, over streamable HTTP, that stands for a
// side-effecting tool server behind a kind: mcp entry, as
// internal/downstream does for http tools. Its tool send_receipt performs
// an effect (a receipt in an in-memory ledger) once per idempotency key,
// read from params._meta["io.idemctl/idempotency-key"] or the
// Idempotency-Key header; with IgnoreKeys every call is an effect, the
// contrast. It can drop its next answers after the effect (the fault
// scenario's lost answer) and forget its sessions (an expired session).
package demomcp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemctl/idemctl/internal/wire"
)

// MetaKey is where idemctl puts the key in a tools/call's params._meta.
const MetaKey = "io.idemctl/idempotency-key"

// Attempt is one tools/call of send_receipt as the server saw it.
type Attempt struct {
	MetaKey   string `json:"meta_key"`
	HeaderKey string `json:"header_key"`
	Effect    bool   `json:"effect"` // this attempt performed an effect
}

// Receipt is one effect.
type Receipt struct {
	ID     string `json:"id"`
	Key    string `json:"key,omitempty"`
	To     string `json:"to"`
	Amount int64  `json:"amount"`
}

// Ledger is GET /ledger's body.
type Ledger struct {
	Receipts []Receipt `json:"receipts"`
	Attempts []Attempt `json:"attempts"`
}

// Server is the demo server.
type Server struct {
	ignoreKeys bool
	mu         sync.Mutex
	ledger     Ledger
	byKey      map[string]Receipt
	drop       atomic.Int64 // answers of tools/call still to drop
	mcpH       atomic.Pointer[mcp.StreamableHTTPHandler]
}

// New returns a demo server; ignoreKeys makes every call an effect.
func New(ignoreKeys bool) *Server {
	s := &Server{ignoreKeys: ignoreKeys, byKey: map[string]Receipt{}}
	s.ForgetSessions()
	return s
}

type receiptArgs struct {
	To     string `json:"to" jsonschema:"who gets the receipt"`
	Amount int64  `json:"amount" jsonschema:"amount in cents"`
}

type receiptOut struct {
	ReceiptID string `json:"receipt_id"`
	Replayed  bool   `json:"replayed"`
}

type sleepArgs struct {
	Millis int `json:"millis" jsonschema:"how long to sleep"`
}

func (s *Server) mcpServer() *mcp.Server {
	srv := mcp.NewServer(&mcp.Implementation{Name: "idemctl-demo-mcp", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "send_receipt", Description: "Send a receipt (an effect: once per idempotency key)",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(false)}}, s.sendReceipt)
	mcp.AddTool(srv, &mcp.Tool{Name: "refuse", Description: "Always answers isError: true",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "refused: the demo always refuses"}}}, nil, nil
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "sleep", Description: "Sleeps, then answers",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, _ *mcp.CallToolRequest, a sleepArgs) (*mcp.CallToolResult, any, error) {
			select {
			case <-time.After(time.Duration(a.Millis) * time.Millisecond):
			case <-ctx.Done():
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "awake"}}}, nil, nil
		})
	return srv
}

func ptr[T any](v T) *T { return &v }

func (s *Server) sendReceipt(_ context.Context, req *mcp.CallToolRequest, a receiptArgs) (*mcp.CallToolResult, receiptOut, error) {
	var at Attempt
	if k, ok := req.Params.Meta[MetaKey].(string); ok {
		at.MetaKey = k
	}
	if req.Extra != nil && req.Extra.Header != nil {
		at.HeaderKey = req.Extra.Header.Get(wire.HeaderIdempotencyKey)
	}
	key := at.MetaKey
	if key == "" {
		key = at.HeaderKey
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, seen := s.byKey[key]; seen && key != "" && !s.ignoreKeys {
		s.ledger.Attempts = append(s.ledger.Attempts, at)
		return nil, receiptOut{ReceiptID: r.ID, Replayed: true}, nil
	}
	at.Effect = true
	s.ledger.Attempts = append(s.ledger.Attempts, at)
	r := Receipt{ID: fmt.Sprintf("r_%d", len(s.ledger.Receipts)+1), Key: key, To: a.To, Amount: a.Amount}
	s.ledger.Receipts = append(s.ledger.Receipts, r)
	s.byKey[key] = r
	return nil, receiptOut{ReceiptID: r.ID}, nil
}

// DropAnswers makes the next n tools/call answers be lost: the call runs
// (its effect happens), then the connection closes without an answer.
func (s *Server) DropAnswers(n int) { s.drop.Store(int64(n)) }

// ForgetSessions drops every session, as a server that expired them
// would: the next request of an old session gets 404.
func (s *Server) ForgetSessions() {
	srv := s.mcpServer()
	s.mcpH.Store(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv },
		&mcp.StreamableHTTPOptions{JSONResponse: true}))
}

// Ledger returns the effects and attempts so far.
func (s *Server) Ledger() Ledger {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Ledger{Receipts: append([]Receipt{}, s.ledger.Receipts...), Attempts: append([]Attempt{}, s.ledger.Attempts...)}
}

// Handler serves MCP at /mcp, GET /ledger, and POST /drop?n=N (the fault
// scenario drops answers through it) and POST /forget-sessions.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/mcp", s.serveMCP)
	mux.HandleFunc("GET /ledger", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(s.Ledger())
	})
	mux.HandleFunc("POST /drop", func(w http.ResponseWriter, r *http.Request) {
		var n int
		if _, err := fmt.Sscan(r.URL.Query().Get("n"), &n); err != nil || n < 0 || n > 100 {
			http.Error(w, "n: an integer from 0 to 100", http.StatusBadRequest)
			return
		}
		s.DropAnswers(n)
	})
	mux.HandleFunc("POST /forget-sessions", func(http.ResponseWriter, *http.Request) { s.ForgetSessions() })
	return mux
}

func (s *Server) serveMCP(w http.ResponseWriter, r *http.Request) {
	h := s.mcpH.Load()
	if r.Method != http.MethodPost || s.drop.Load() <= 0 {
		h.ServeHTTP(w, r)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, "reading the body", http.StatusBadRequest)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	var msg struct {
		Method string `json:"method"`
	}
	if json.Unmarshal(body, &msg) != nil || msg.Method != "tools/call" || s.drop.Add(-1) < 0 {
		h.ServeHTTP(w, r)
		return
	}
	// The call runs to the end; its answer is thrown away and the
	// connection closed, as a network that lost it would.
	h.ServeHTTP(httptest.NewRecorder(), r)
	if hj, ok := w.(http.Hijacker); ok {
		if c, _, err := hj.Hijack(); err == nil {
			_ = c.Close()
			return
		}
	}
	panic(http.ErrAbortHandler)
}
