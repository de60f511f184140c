package console

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"sync"
	"time"
)

// Session lifetimes (docs/console.md, "Sessions").
const (
	// DefaultSessionIdle ends a session not used for this long.
	DefaultSessionIdle = 12 * time.Hour
	// DefaultSessionLifetime ends a session this long after its sign-in,
	// used or not.
	DefaultSessionLifetime = 7 * 24 * time.Hour
	// MaxSessionsPerPrincipal bounds the memory one principal's sign-ins
	// can hold; a sign-in beyond it ends that principal's least recently
	// used session.
	MaxSessionsPerPrincipal = 100
)

// liveSession is a signed-in browser, kept in this process only: the
// cookie holds a random id, never the token, so a stolen cookie is worth
// no more than the session, and signing out or revoking the token ends it.
type liveSession struct {
	principal string
	// tokenHash is the SHA-256 of the token signed in with: every use
	// checks that the server still accepts it (a token removed from the
	// token file ends its sessions).
	tokenHash [sha256.Size]byte
	// csrfKey keys the CSRF tokens of this session's forms.
	csrfKey  string
	created  time.Time
	lastSeen time.Time
}

// sessions is the in-memory session table. Ids are looked up by their
// SHA-256, so the map's timing tells nothing about a guessed id.
type sessions struct {
	idle, lifetime time.Duration
	now            func() time.Time

	mu        sync.Mutex
	byID      map[[sha256.Size]byte]*liveSession
	lastSweep time.Time
}

func newSessions(idle, lifetime time.Duration, now func() time.Time) *sessions {
	return &sessions{idle: idle, lifetime: lifetime, now: now, byID: map[[sha256.Size]byte]*liveSession{}}
}

func randomString(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b)
}

// create starts a session and returns its id (32 random bytes).
func (s *sessions) create(principal string, tokenHash [sha256.Size]byte) string {
	id := randomString(32)
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweepLocked(now)
	s.capLocked(principal)
	s.byID[sha256.Sum256([]byte(id))] = &liveSession{principal: principal, tokenHash: tokenHash,
		csrfKey: randomString(32), created: now, lastSeen: now}
	return id
}

// get returns a copy of the live session with this id and marks it used;
// an expired one is deleted and not returned.
func (s *sessions) get(id string) (liveSession, bool) {
	k := sha256.Sum256([]byte(id))
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	ls, ok := s.byID[k]
	if !ok {
		return liveSession{}, false
	}
	if s.expired(ls, now) {
		delete(s.byID, k)
		return liveSession{}, false
	}
	ls.lastSeen = now
	return *ls, true
}

// end deletes the session with this id (sign-out, a revoked token).
func (s *sessions) end(id string) {
	k := sha256.Sum256([]byte(id))
	s.mu.Lock()
	delete(s.byID, k)
	s.mu.Unlock()
}

func (s *sessions) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.byID)
}

func (s *sessions) expired(ls *liveSession, now time.Time) bool {
	return now.Sub(ls.lastSeen) >= s.idle || now.Sub(ls.created) >= s.lifetime
}

// sweepLocked deletes the expired sessions, at most once a minute (a
// sign-in pays for it; a session nobody uses again would otherwise stay).
func (s *sessions) sweepLocked(now time.Time) {
	if now.Sub(s.lastSweep) < time.Minute {
		return
	}
	s.lastSweep = now
	for k, ls := range s.byID {
		if s.expired(ls, now) {
			delete(s.byID, k)
		}
	}
}

// capLocked makes room for one more session of principal.
func (s *sessions) capLocked(principal string) {
	var (
		n      int
		oldest [sha256.Size]byte
		at     time.Time
	)
	for k, ls := range s.byID {
		if ls.principal != principal {
			continue
		}
		n++
		if at.IsZero() || ls.lastSeen.Before(at) {
			oldest, at = k, ls.lastSeen
		}
	}
	if n >= MaxSessionsPerPrincipal {
		delete(s.byID, oldest)
	}
}
