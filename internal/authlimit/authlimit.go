// Package authlimit throttles failed authentications per client address,
// for the API and the console alike: each client has a token bucket that
// every wrong credential empties by one; an empty bucket refuses the
// client's next attempts (429, before any token is looked at) until it
// refills. Guessing tokens is then as slow as the refill rate, and a
// client that only ever sends good tokens is never touched.
//
// Failures are logged in aggregate, one line per interval with the
// counts, never a token and never one line per attempt (a flood of bad
// tokens must not become a flood of log lines).
package authlimit

import (
	"log/slog"
	"math"
	"net/http"
	"net/netip"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"golang.org/x/time/rate"

	"github.com/idemctl/idemctl/internal/wire"
)

// Code is the error code of a throttled request (docs/api.md, "Errors").
const Code = wire.CodeAuthThrottled

// Defaults of Config (docs/operations.md, "Authentication").
const (
	// DefaultBurst is how many failures in a row a client may have.
	DefaultBurst = 10
	// DefaultRefill is how often a client regains one failure: 10 per
	// minute once its burst is spent.
	DefaultRefill = 6 * time.Second
	// DefaultMaxClients bounds the memory: at most this many clients with
	// recent failures are remembered (about 200 bytes each); the least
	// recently failing is forgotten first.
	DefaultMaxClients = 10_000
	// DefaultLogInterval is how often the aggregate line is written
	// while failures happen.
	DefaultLogInterval = time.Minute
)

// Config tunes a Limiter; zero values take the defaults.
type Config struct {
	Burst       int
	Refill      time.Duration
	MaxClients  int
	LogInterval time.Duration
	// ClientAddr is the address a request comes from (the trusted-proxy
	// rules); nil means the connection's peer.
	ClientAddr func(*http.Request) netip.Addr
	// Logger receives the aggregate lines; nil discards them.
	Logger *slog.Logger
	// now is the clock (tests).
	now func() time.Time
}

// Limiter is the per-client failure throttle. Safe for concurrent use.
type Limiter struct {
	cfg     Config
	clients *lru.Cache[netip.Prefix, *rate.Limiter]

	mu        sync.Mutex
	failures  int64
	throttled int64
	seen      map[netip.Prefix]struct{} // distinct clients this interval, capped
	timer     *time.Timer
}

// New returns a Limiter.
func New(cfg Config) *Limiter {
	if cfg.Burst <= 0 {
		cfg.Burst = DefaultBurst
	}
	if cfg.Refill <= 0 {
		cfg.Refill = DefaultRefill
	}
	if cfg.MaxClients <= 0 {
		cfg.MaxClients = DefaultMaxClients
	}
	if cfg.LogInterval <= 0 {
		cfg.LogInterval = DefaultLogInterval
	}
	if cfg.ClientAddr == nil {
		cfg.ClientAddr = peerAddr
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.now == nil {
		cfg.now = time.Now
	}
	c, _ := lru.New[netip.Prefix, *rate.Limiter](cfg.MaxClients) // errs only on a size <= 0
	return &Limiter{cfg: cfg, clients: c, seen: map[netip.Prefix]struct{}{}}
}

// key is the unit a bucket belongs to: one IPv4 address, or one IPv6 /64
// (a single host usually has a whole /64, so per-address buckets would
// give it 2^64 of them).
func key(a netip.Addr) netip.Prefix {
	a = a.Unmap()
	bits := a.BitLen()
	if a.Is6() {
		bits = 64
	}
	p, _ := a.Prefix(bits) // the zero Addr gives the zero Prefix: one shared bucket
	return p
}

// Check reports whether r's client may authenticate now; when it may not,
// how long until it may (at least a second), and the refusal is counted.
// It is cheap: one map lookup, no token hashing.
func (l *Limiter) Check(r *http.Request) (retryAfter time.Duration, ok bool) {
	if l == nil {
		return 0, true
	}
	k := key(l.cfg.ClientAddr(r))
	b, found := l.clients.Peek(k)
	if !found {
		return 0, true
	}
	now := l.cfg.now()
	tokens := b.TokensAt(now)
	if tokens >= 1 {
		return 0, true
	}
	wait := time.Duration(math.Ceil((1 - tokens) * float64(l.cfg.Refill)))
	l.count(k, false)
	return max(wait, time.Second), false
}

// Failed records a failed authentication by r's client.
func (l *Limiter) Failed(r *http.Request) {
	if l == nil {
		return
	}
	k := key(l.cfg.ClientAddr(r))
	b, found := l.clients.Get(k)
	if !found {
		b = rate.NewLimiter(rate.Every(l.cfg.Refill), l.cfg.Burst)
		// ContainsOrAdd: a concurrent first failure of the same client
		// must not replace the bucket the other one just charged.
		if ok, _ := l.clients.ContainsOrAdd(k, b); ok {
			b, _ = l.clients.Get(k)
		}
	}
	b.AllowN(l.cfg.now(), 1)
	l.count(k, true)
}

// count adds to this interval's figures and arms the interval's log line.
func (l *Limiter) count(k netip.Prefix, failure bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if failure {
		l.failures++
	} else {
		l.throttled++
	}
	if len(l.seen) < 1000 {
		l.seen[k] = struct{}{}
	}
	if l.timer == nil {
		l.timer = time.AfterFunc(l.cfg.LogInterval, l.flush)
	}
}

// flush writes the interval's line and starts a new interval.
func (l *Limiter) flush() {
	l.mu.Lock()
	failures, throttled, clients := l.failures, l.throttled, len(l.seen)
	l.failures, l.throttled, l.timer = 0, 0, nil
	clear(l.seen)
	l.mu.Unlock()
	l.cfg.Logger.Warn("failed authentications", "failures", failures, "throttled", throttled,
		"clients", clients, "interval", l.cfg.LogInterval.String())
}

func peerAddr(r *http.Request) netip.Addr {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr()
}
