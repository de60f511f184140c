package server

import (
	"context"
	"sync"
	"time"

	"github.com/idemctl/idemctl/internal/store"
)

// Per-principal limits (docs/operations.md, "Fairness"). MaxPending and
// MaxHeldWaits are shared by every principal: without these, one token
// could fill the queue, so that every other principal's new keys get 503,
// or hold every wait slot (MCP waits included). They apply with Auth
// only: without it every call has the one default principal, and a
// per-principal limit would merely lower the global one.
const (
	// DefaultMaxPendingPerPrincipal is half of DefaultMaxPending: one
	// principal can never take more than half of the queue.
	DefaultMaxPendingPerPrincipal = DefaultMaxPending / 2
	// DefaultMaxHeldWaitsPerPrincipal is a quarter of DefaultMaxHeldWaits.
	DefaultMaxHeldWaitsPerPrincipal = DefaultMaxHeldWaits / 4
)

// fillPerPrincipal applies the per-principal limits' defaults, after the
// global limits': off without Auth or when negative, the default capped
// at the global limit when zero. After it, 0 means off.
func (c *Config) fillPerPrincipal() {
	if c.Auth == nil {
		c.MaxPendingPerPrincipal, c.MaxHeldWaitsPerPrincipal = 0, 0
		return
	}
	switch {
	case c.MaxPendingPerPrincipal < 0:
		c.MaxPendingPerPrincipal = 0
	case c.MaxPendingPerPrincipal == 0:
		c.MaxPendingPerPrincipal = DefaultMaxPendingPerPrincipal
		if c.MaxPending > 0 {
			c.MaxPendingPerPrincipal = min(c.MaxPendingPerPrincipal, c.MaxPending)
		}
	}
	switch {
	case c.MaxHeldWaitsPerPrincipal < 0:
		c.MaxHeldWaitsPerPrincipal = 0
	case c.MaxHeldWaitsPerPrincipal == 0:
		c.MaxHeldWaitsPerPrincipal = min(DefaultMaxHeldWaitsPerPrincipal, c.MaxHeldWaits)
	}
}

// principalPending estimates each principal's pending calls, for the
// per-principal back-pressure of new keys (Config.MaxPendingPerPrincipal).
// No principal can be at its limit while the whole queue is shorter than
// that limit, so below it nothing is read and the check is the queue
// gauge's. Above it, the counts are read from the store at most once per
// interval (store.PendingByPrincipal), and between reads the principal's new calls on this server
// are added. Calls claimed since the last read are still counted until the
// next: a principal may be refused for up to one interval after its queue
// went below the limit; with several instances, others' new calls are
// seen at the next read, as for MaxPending.
type principalPending struct {
	limit    int64 // 0: off
	every    time.Duration
	st       store.Store
	queueLen func() int64 // the whole queue's estimate (executor.Executor.Pending)

	mu      sync.Mutex
	reading bool
	read    map[string]int64
	at      time.Time
	delta   map[string]int64
}

// added counts a call this server made pending for principal.
func (p *principalPending) added(principal string) {
	if p.limit <= 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.delta == nil {
		p.delta = map[string]int64{}
	}
	p.delta[principal]++
}

// full reports whether principal is at its limit of pending calls. It may
// read the store (at most once per interval, one request at a time); a
// failed read keeps the last counts.
func (p *principalPending) full(ctx context.Context, principal string) bool {
	if p.limit <= 0 {
		return false
	}
	p.mu.Lock()
	if p.queueLen() < p.limit {
		// Nobody can be at the limit: forget the counts, so a principal's
		// calls added long ago are not held against it later.
		p.read, p.delta, p.at = nil, nil, time.Time{}
		p.mu.Unlock()
		return false
	}
	if !p.reading && (p.at.IsZero() || time.Since(p.at) >= p.every) {
		p.reading = true
		p.mu.Unlock()
		read, err := p.st.PendingByPrincipal(ctx, 1)
		p.mu.Lock()
		p.reading = false
		if err == nil {
			p.read, p.delta, p.at = read, nil, time.Now()
		}
	}
	n := p.read[principal] + p.delta[principal]
	p.mu.Unlock()
	return n >= p.limit
}

// heldWaits counts each principal's held waits (Config.MaxHeldWaitsPerPrincipal).
type heldWaits struct {
	limit int // 0: off
	mu    sync.Mutex
	n     map[string]int
}

// take reserves a wait for principal; false means it is at its limit.
func (h *heldWaits) take(principal string) bool {
	if h.limit <= 0 {
		return true
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n[principal] >= h.limit {
		return false
	}
	if h.n == nil {
		h.n = map[string]int{}
	}
	h.n[principal]++
	return true
}

// give returns a wait taken for principal.
func (h *heldWaits) give(principal string) {
	if h.limit <= 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n[principal]--; h.n[principal] <= 0 {
		delete(h.n, principal) // the map holds only principals waiting now
	}
}
