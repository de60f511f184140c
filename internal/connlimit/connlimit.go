// Package connlimit bounds the connections an HTTP server keeps open
// (docs/operations.md, "Connections"): in total, so that idle clients
// cannot take every file descriptor the process has (the executor's
// tools need some to reach their downstreams), and idle per client
// address, so that one client cannot hold thousands of keep-alive
// connections that need no token (/healthz).
//
// A Listener counts the connections it accepted; its ConnState method,
// set as the http.Server's ConnState, tells it which are idle (kept alive
// between requests). At the total limit a new connection
// takes the place of the connection idle the longest, as nginx reuses
// keep-alive connections when it runs short; with none idle, the new
// connection is closed at once. Beyond the idle limit of one address, its
// connection idle the longest is closed. A request is never cut: only
// idle connections are closed.
package connlimit

import (
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
)

// Listener limits the connections accepted from an inner listener. Create
// it with New and set its ConnState as the http.Server's.
type Listener struct {
	net.Listener
	max        int
	maxIdleper int

	mu sync.Mutex
	// tick orders the moments connections became idle.
	tick  uint64
	conns map[*conn]struct{}
	// idle is every idle connection by address, in the order they
	// became idle (the one idle the longest first).
	idle map[string][]*conn

	// Refused counts connections closed at once (the total limit reached
	// with none idle); Evicted, idle connections closed to make room or
	// over an address's idle limit.
	Refused atomic.Int64
	Evicted atomic.Int64
}

// New limits inner to maxConns connections in all and maxIdlePerAddr idle
// ones per client IP address (0: no limit for either).
func New(inner net.Listener, maxConns, maxIdlePerAddr int) *Listener {
	return &Listener{Listener: inner, max: maxConns, maxIdleper: maxIdlePerAddr,
		conns: map[*conn]struct{}{}, idle: map[string][]*conn{}}
}

// conn is an accepted connection, known to its Listener until closed.
type conn struct {
	net.Conn
	l    *Listener
	addr string // the client's IP address
	// idleSince is the Listener's tick when the connection last became
	// idle.
	idleSince uint64
	// gone is set by whoever forgets the connection first: its Close, or
	// an eviction (which holds the Listener's lock, so Close must not
	// wait for the eviction under that lock).
	gone atomic.Bool
}

// Close closes the connection and forgets it.
func (c *conn) Close() error {
	err := c.Conn.Close()
	if c.gone.CompareAndSwap(false, true) {
		c.l.mu.Lock()
		defer c.l.mu.Unlock()
		delete(c.l.conns, c)
		c.l.unidleLocked(c)
	}
	return err
}

// CloseWrite half-closes the connection when the inner one can (a TCP
// connection): the server's graceful close of a refused request needs it.
func (c *conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

// Accept waits for a connection that fits the limits.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		nc, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		host, _, err := net.SplitHostPort(nc.RemoteAddr().String())
		if err != nil {
			host = nc.RemoteAddr().String()
		}
		l.mu.Lock()
		if l.max > 0 && len(l.conns) >= l.max {
			victim := l.oldestIdleLocked("")
			if victim == nil {
				l.mu.Unlock()
				l.Refused.Add(1)
				_ = nc.Close()
				continue
			}
			l.evictLocked(victim)
		}
		c := &conn{Conn: nc, l: l, addr: host}
		// A new connection is not idle: its client is about to send a
		// request (a burst of them from one address, behind a proxy,
		// must not evict each other). One that sends nothing is closed
		// by the server's header timeout.
		l.conns[c] = struct{}{}
		l.mu.Unlock()
		return c, nil
	}
}

// ConnState is the http.Server's ConnState hook: it tracks which
// connections are idle.
func (l *Listener) ConnState(nc net.Conn, state http.ConnState) {
	c, ok := nc.(*conn)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, live := l.conns[c]; !live {
		return
	}
	switch state {
	case http.StateIdle:
		l.idleLocked(c)
	case http.StateActive, http.StateHijacked:
		l.unidleLocked(c)
	}
}

// idleLen is the number of idle connections now (tests).
func (l *Listener) idleLen() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, list := range l.idle {
		n += len(list)
	}
	return n
}

// Len is the number of connections open now.
func (l *Listener) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns)
}

// idleLocked marks c idle, then enforces its address's idle limit.
func (l *Listener) idleLocked(c *conn) {
	l.unidleLocked(c) // idempotent: a connection is listed once
	l.tick++
	c.idleSince = l.tick
	l.idle[c.addr] = append(l.idle[c.addr], c)
	if l.maxIdleper > 0 && len(l.idle[c.addr]) > l.maxIdleper {
		l.evictLocked(l.idle[c.addr][0])
	}
}

func (l *Listener) unidleLocked(c *conn) {
	list := l.idle[c.addr]
	for i, o := range list {
		if o == c {
			list = append(list[:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(l.idle, c.addr)
	} else {
		l.idle[c.addr] = list
	}
}

// oldestIdleLocked is the connection idle the longest (of addr, or of any
// address for ""), nil if none.
func (l *Listener) oldestIdleLocked(addr string) *conn {
	var best *conn
	for a, list := range l.idle {
		if (addr == "" || a == addr) && len(list) > 0 && (best == nil || list[0].idleSince < best.idleSince) {
			best = list[0]
		}
	}
	return best
}

// evictLocked closes an idle connection and forgets it at once (its Close
// then finds nothing left to forget). The server's goroutine, blocked
// reading the next request, gets an error and ends.
func (l *Listener) evictLocked(c *conn) {
	delete(l.conns, c)
	l.unidleLocked(c)
	c.gone.Store(true)
	l.Evicted.Add(1)
	_ = c.Conn.Close()
}

// RaiseFileLimit raises the process's soft limit of open files to its hard
// limit and returns the soft limit in effect. Go's runtime already does
// so at start on Linux; asking again is harmless and makes the rule
// explicit where the limits are derived from it.
func RaiseFileLimit() (uint64, error) {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 0, err
	}
	if r.Cur < r.Max {
		raised := r
		raised.Cur = r.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised); err == nil {
			r = raised
		}
	}
	if r.Cur == 0 {
		return 0, errors.New("open files limit is 0")
	}
	return r.Cur, nil
}

// DefaultMaxConns derives the connection limit from the open files limit:
// what is left after reserve descriptors (the executor's tool
// connections, the database, logs), at most 10,000 (each connection costs
// a goroutine and its buffers, some 10 KB), at least 64.
func DefaultMaxConns(fileLimit uint64, reserve int) int {
	n := int64(min(fileLimit, 1<<30)) - int64(reserve)
	return int(max(64, min(n, 10_000)))
}
