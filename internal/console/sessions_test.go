package console

import (
	"crypto/sha256"
	"testing"
	"time"
)

// TestSessionExpiry: a session ends after SessionIdle unused, and after
// SessionLifetime however much it is used; end ends it at once.
func TestSessionExpiry(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_000_000, 0)
	s := newSessions(time.Hour, 3*time.Hour, func() time.Time { return now })
	h := sha256.Sum256([]byte("tok"))

	idle := s.create("alice", h)
	now = now.Add(59 * time.Minute)
	if _, ok := s.get(idle); !ok {
		t.Fatal("a session used within the idle time ended")
	}
	now = now.Add(time.Hour)
	if _, ok := s.get(idle); ok {
		t.Error("a session unused for the idle time is still live")
	}

	busy := s.create("alice", h)
	for i := range 4 { // used every 40 minutes: never idle, 2h40m old
		now = now.Add(40 * time.Minute)
		if _, ok := s.get(busy); !ok {
			t.Fatalf("a busy session ended after %d uses", i)
		}
	}
	now = now.Add(40 * time.Minute) // 3h20m after its sign-in
	if _, ok := s.get(busy); ok {
		t.Error("a session past its lifetime is still live")
	}

	ended := s.create("alice", h)
	s.end(ended)
	if _, ok := s.get(ended); ok {
		t.Error("an ended session is still live")
	}
	if ls, ok := s.get(s.create("bob", h)); !ok || ls.principal != "bob" || ls.tokenHash != h || ls.csrfKey == "" {
		t.Errorf("a new session: %+v %v", ls, ok)
	}
}

// TestSessionCap: one principal's sign-ins hold at most
// MaxSessionsPerPrincipal sessions; the least recently used goes first,
// and other principals' sessions are untouched.
func TestSessionCap(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_000_000, 0)
	s := newSessions(time.Hour, 3*time.Hour, func() time.Time { return now })
	h := sha256.Sum256([]byte("tok"))
	bob := s.create("bob", h)
	first := s.create("alice", h)
	var ids []string
	for range MaxSessionsPerPrincipal + 50 {
		now = now.Add(time.Millisecond)
		ids = append(ids, s.create("alice", h))
	}
	if n := s.len(); n != MaxSessionsPerPrincipal+1 {
		t.Fatalf("%d sessions, want %d", n, MaxSessionsPerPrincipal+1)
	}
	if _, ok := s.get(first); ok {
		t.Error("alice's oldest session survived the cap")
	}
	if _, ok := s.get(ids[len(ids)-1]); !ok {
		t.Error("alice's newest session is gone")
	}
	if _, ok := s.get(bob); !ok {
		t.Error("bob's session was evicted by alice's sign-ins")
	}
}

func TestHumanDuration(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		DefaultSessionIdle: "12 hours", DefaultSessionLifetime: "7 days", time.Hour: "1 hour",
		36 * time.Hour: "36 hours", 90 * time.Minute: "90 minutes", 24 * time.Hour: "1 day",
	} {
		if got := humanDuration(d); got != want {
			t.Errorf("humanDuration(%s) = %q, want %q", d, got, want)
		}
	}
}
