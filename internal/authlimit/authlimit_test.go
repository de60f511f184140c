package authlimit

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func from(addr string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = addr
	return r
}

// TestThrottle: a client is refused after its burst of failures, with a
// Retry-After of the refill, and may try again once a token refilled;
// another client, and the same client's good attempts before the burst,
// are not affected; an IPv6 /64 is one client.
func TestThrottle(t *testing.T) {
	c := &clock{t: time.Unix(1_000_000, 0)}
	l := New(Config{Burst: 3, Refill: 10 * time.Second, now: c.now})
	a := from("192.0.2.1:1000")
	for i := range 3 {
		if _, ok := l.Check(a); !ok {
			t.Fatalf("refused before failure %d", i+1)
		}
		l.Failed(a)
	}
	wait, ok := l.Check(a)
	if ok || wait != 10*time.Second {
		t.Fatalf("after the burst: ok %v, retry after %s; want refused for 10s", ok, wait)
	}
	if _, ok := l.Check(from("192.0.2.2:1000")); !ok {
		t.Error("another client is refused")
	}
	c.add(4 * time.Second)
	if wait, ok := l.Check(a); ok || wait != 6*time.Second {
		t.Errorf("4s later: ok %v, retry after %s; want refused for 6s", ok, wait)
	}
	c.add(6 * time.Second)
	if _, ok := l.Check(a); !ok {
		t.Error("not allowed again after a refill")
	}
	l.Failed(a)
	if _, ok := l.Check(a); ok {
		t.Error("one refilled failure spent, still allowed")
	}

	v6 := New(Config{Burst: 1, Refill: time.Minute, now: c.now})
	v6.Failed(from("[2001:db8:1:2::1]:1000"))
	if _, ok := v6.Check(from("[2001:db8:1:2::ffff]:1000")); ok {
		t.Error("another address of the same /64 is not throttled")
	}
	if _, ok := v6.Check(from("[2001:db8:1:3::1]:1000")); !ok {
		t.Error("another /64 is throttled")
	}
}

// TestMaxClients: the memory is bounded: past MaxClients the least
// recently failing client is forgotten.
func TestMaxClients(t *testing.T) {
	l := New(Config{Burst: 1, Refill: time.Hour, MaxClients: 100})
	for i := range 1000 {
		l.Failed(from("10.0." + itoa(i/250) + "." + itoa(i%250) + ":1"))
	}
	if n := l.clients.Len(); n != 100 {
		t.Fatalf("%d clients remembered, want 100", n)
	}
	if _, ok := l.Check(from("10.0.3.249:1")); ok {
		t.Error("the latest client is not throttled")
	}
	if _, ok := l.Check(from("10.0.0.0:1")); !ok {
		t.Error("the oldest client is still remembered")
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// TestAggregateLog: failures are logged as one line per interval with
// their counts, not one line each.
func TestAggregateLog(t *testing.T) {
	var buf syncBuffer
	l := New(Config{Burst: 2, Refill: time.Hour, LogInterval: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	for range 5 {
		if _, ok := l.Check(from("192.0.2.1:1")); ok {
			l.Failed(from("192.0.2.1:1"))
		}
	}
	l.Failed(from("192.0.2.9:1"))
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(buf.String(), "failed authentications") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	out := buf.String()
	if n := strings.Count(out, "\n"); n != 1 || !strings.Contains(out, "failures=3") ||
		!strings.Contains(out, "throttled=3") || !strings.Contains(out, "clients=2") {
		t.Fatalf("log: %q; want one line with failures=3 throttled=3 clients=2", out)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }
