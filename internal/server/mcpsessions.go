package server

import (
	"crypto/sha256"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemctl/idemctl/internal/wire"
)

// MCP session limits (docs/mcp.md, "Sessions"). The SDK's streamable
// handler keeps every session it opened (a goroutine and its buffers, some
// 16 KB) until the client deletes it or it has been idle for its timeout:
// without a cap one token could open tens of thousands.
const (
	// DefaultMaxMCPSessions caps the live MCP sessions of a server.
	DefaultMaxMCPSessions = 1000
	// DefaultMaxMCPSessionsPerPrincipal caps one principal's.
	DefaultMaxMCPSessionsPerPrincipal = 100
	// mcpInitTimeout closes a session whose client has not finished
	// initializing (sent notifications/initialized) this long after it
	// opened it: a client that does not go on never will.
	mcpInitTimeout = 10 * time.Second
	// mcpRevokeCheck is how often the token file's last reload is looked
	// at, to close the sessions of tokens it no longer holds.
	mcpRevokeCheck = time.Second
	// notSettled is the principal of a session whose initialized
	// notification overtook the end of the request that opened it.
	notSettled = "\x00not settled"
)

// mcpSessions tracks the MCP sessions the SDK's handler opened: whose
// they are and with which token, and whether their client finished
// initializing. The SDK keeps the sessions; this only counts them (the
// SDK's own list, mcp.Server.Sessions, says which are still live) and
// closes those that must end.
type mcpSessions struct {
	srv          *mcp.Server
	max, perUser int // 0: no limit
	initTimeout  time.Duration
	auth         *Auth

	mu sync.Mutex
	m  map[string]*mcpSession // by session id
	// reserved counts sessions being opened now, by principal, so that
	// concurrent opens cannot pass the caps together.
	reserved      map[string]int
	reservedTotal int
}

type mcpSession struct {
	principal   string
	token       [sha256.Size]byte // the SHA-256 of the token that opened it
	initialized bool
}

func newMCPSessions(srv *mcp.Server, maxTotal, perPrincipal int, auth *Auth) *mcpSessions {
	return &mcpSessions{srv: srv, max: maxTotal, perUser: perPrincipal, initTimeout: mcpInitTimeout, auth: auth,
		m: map[string]*mcpSession{}, reserved: map[string]int{}}
}

// handler wraps the SDK's handler: a POST without a session id opens a
// session, and is refused with 503 overloaded when a cap is reached.
func (t *mcpSessions) handler(s *Server, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.Header.Get("Mcp-Session-Id") != "" {
			next.ServeHTTP(w, r)
			return
		}
		principal := principalOf(r.Context())
		if msg := t.reserve(principal); msg != "" {
			s.m.limitRefusals.WithLabelValues(limitMCPSessions).Inc()
			w.Header().Set("Retry-After", "1")
			writeError(w, s.log, http.StatusServiceUnavailable, wire.CodeOverloaded, msg)
			return
		}
		// The reservation is settled when the answer starts, not when the
		// handler returns: the client goes on as soon as it has the
		// answer (the SDK's own client sends its next request while the
		// first's handler is still finishing).
		sw := &settleWriter{ResponseWriter: w}
		sw.settle = sync.OnceFunc(func() { t.settle(principal, w.Header().Get("Mcp-Session-Id"), r) })
		defer sw.settle()
		next.ServeHTTP(sw, r)
	})
}

// settleWriter runs settle when the answer starts.
type settleWriter struct {
	http.ResponseWriter
	settle func()
}

func (w *settleWriter) WriteHeader(code int) {
	w.settle()
	w.ResponseWriter.WriteHeader(code)
}

func (w *settleWriter) Write(b []byte) (int, error) {
	w.settle()
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController (the SDK's flushes) reach the
// underlying writer.
func (w *settleWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// reserve counts a session about to be opened, or says why not.
func (t *mcpSessions) reserve(principal string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pruneLocked()
	mine := t.reserved[principal]
	for _, ss := range t.m {
		if ss.principal == principal {
			mine++
		}
	}
	switch {
	case t.perUser > 0 && mine >= t.perUser:
		return fmt.Sprintf("too many MCP sessions for this principal (at most %d): end one (DELETE %s) or retry later", t.perUser, wire.PathMCP)
	case t.max > 0 && len(t.m)+t.reservedTotal >= t.max:
		return fmt.Sprintf("too many MCP sessions on this server (at most %d); retry later", t.max)
	}
	t.reserved[principal]++
	t.reservedTotal++
	return ""
}

// settle turns a reservation into the session the SDK opened (id, "" if
// none), and closes it later if its client has not finished initializing.
func (t *mcpSessions) settle(principal, id string, r *http.Request) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.reserved[principal]--; t.reserved[principal] <= 0 {
		delete(t.reserved, principal)
	}
	t.reservedTotal--
	if id == "" {
		return
	}
	ss := &mcpSession{principal: principal}
	if token, ok := wire.BearerToken(r.Header.Get("Authorization")); ok {
		ss.token = sha256.Sum256([]byte(token))
	}
	if old, ok := t.m[id]; ok && old.initialized {
		ss.initialized = true // the notification came first
	}
	t.m[id] = ss
	time.AfterFunc(t.initTimeout, func() {
		t.mu.Lock()
		ss, ok := t.m[id]
		stale := ok && !ss.initialized
		t.mu.Unlock()
		if stale {
			t.close(id)
		}
	})
}

// initialized records that a session's client finished initializing
// (mcpdoor.Options.Initialized).
func (t *mcpSessions) initialized(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if ss, ok := t.m[id]; ok {
		ss.initialized = true
		return
	}
	// The notification can overtake the settling of its own open.
	t.m[id] = &mcpSession{initialized: true, principal: notSettled}
}

// pruneLocked forgets the sessions the SDK no longer has (deleted by
// their client, timed out, closed).
func (t *mcpSessions) pruneLocked() {
	live := make(map[string]bool, len(t.m))
	for ss := range t.srv.Sessions() {
		live[ss.ID()] = true
	}
	for id := range t.m {
		if !live[id] {
			delete(t.m, id)
		}
	}
}

// close ends a session: its standing GET stream ends, and the SDK forgets
// it (a request naming it then gets 404, and the client opens another).
func (t *mcpSessions) close(id string) {
	for ss := range t.srv.Sessions() {
		if ss.ID() == id {
			_ = ss.Close()
		}
	}
	t.mu.Lock()
	delete(t.m, id)
	t.mu.Unlock()
}

// watchRevocations closes, after each reload of the token file, the
// sessions opened with a token it no longer holds for their principal,
// until done is closed.
func (t *mcpSessions) watchRevocations(done <-chan struct{}) {
	if t.auth == nil {
		return
	}
	tick := time.NewTicker(mcpRevokeCheck)
	defer tick.Stop()
	seen := t.auth.entries.Load()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
		}
		now := t.auth.entries.Load()
		if now == seen {
			continue
		}
		seen = now
		valid := map[[sha256.Size]byte]string{}
		for _, e := range *now {
			valid[e.hash] = e.principal
		}
		var revoked []string
		t.mu.Lock()
		for id, ss := range t.m {
			if p, ok := valid[ss.token]; ss.principal != notSettled && (!ok || p != ss.principal) {
				revoked = append(revoked, id)
			}
		}
		t.mu.Unlock()
		for _, id := range revoked {
			t.close(id)
		}
	}
}
