package server

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemctl/idemctl/internal/console"
	"github.com/idemctl/idemctl/internal/wire"
)

// MaxPrincipalLen bounds a principal's name in a token file.
const MaxPrincipalLen = 128

// tokenEntry is one line of a token file: a principal and the SHA-256 of
// its token.
type tokenEntry struct {
	principal string
	hash      [sha256.Size]byte
}

// Auth is the set of bearer tokens a server accepts, read from a token file
// (docs/api.md, "Authentication"): one "PRINCIPAL:SHA256HEX" per line, the
// SHA-256 of the token in hex, so the file holds no secret; blank lines and
// lines starting with '#' are ignored. A principal may have several lines
// (several tokens, e.g. while rotating one). Reload re-reads the file; the
// server keeps the last good set when the new file is invalid.
type Auth struct {
	path    string
	entries atomic.Pointer[[]tokenEntry]
	mu      sync.Mutex // serialises Reload
}

// LoadAuth reads a token file. The file must hold at least one token.
func LoadAuth(path string) (*Auth, error) {
	a := NewAuth(path)
	if err := a.Reload(); err != nil {
		return nil, err
	}
	return a, nil
}

// NewAuth is authentication by the token file at path, not read yet: it
// accepts no token until Reload succeeds. serve builds it before it checks
// its Config (whether auth is on decides where the server may listen) and
// reads the file only once the configuration was accepted.
func NewAuth(path string) *Auth {
	a := &Auth{path: path}
	a.entries.Store(&[]tokenEntry{})
	return a
}

// Path is the token file.
func (a *Auth) Path() string { return a.path }

// Len is how many tokens are accepted.
func (a *Auth) Len() int { return len(*a.entries.Load()) }

// Reload re-reads the token file and, if it is valid, replaces the set of
// accepted tokens at once (requests in flight keep the principal they were
// given). An invalid or unreadable file changes nothing and is reported.
func (a *Auth) Reload() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	data, err := os.ReadFile(a.path)
	if err != nil {
		return fmt.Errorf("auth tokens: %w", err)
	}
	entries, err := parseTokens(data)
	if err != nil {
		return fmt.Errorf("auth tokens %s: %w", a.path, err)
	}
	a.entries.Store(&entries)
	return nil
}

// parseTokens parses a token file. Errors name the line, never its
// content beyond the principal (the hash is no secret, but a token pasted
// by mistake instead of its hash would be).
func parseTokens(data []byte) ([]tokenEntry, error) {
	var (
		entries []tokenEntry
		errs    []error
		seen    = map[[sha256.Size]byte]bool{}
	)
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		principal, hexHash, ok := strings.Cut(line, ":")
		if !ok {
			errs = append(errs, fmt.Errorf("line %d: want PRINCIPAL:SHA256HEX", n))
			continue
		}
		if err := CheckPrincipal(principal); err != nil {
			errs = append(errs, fmt.Errorf("line %d: %w", n, err))
			continue
		}
		var e tokenEntry
		e.principal = principal
		raw, err := hex.DecodeString(hexHash)
		if err != nil || len(raw) != sha256.Size {
			errs = append(errs, fmt.Errorf("line %d: the part after ':' must be the 64 hex digits of the token's SHA-256 (idemctl token new prints the line)", n))
			continue
		}
		copy(e.hash[:], raw)
		if seen[e.hash] {
			errs = append(errs, fmt.Errorf("line %d: the same token hash is listed twice", n))
			continue
		}
		seen[e.hash] = true
		entries = append(entries, e)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if len(entries) == 0 {
		return nil, errors.New("no tokens (an empty token file would lock every client out)")
	}
	return entries, nil
}

// CheckPrincipal accepts a principal name: 1 to MaxPrincipalLen visible
// ASCII characters other than ':' (the token file's separator). The empty
// name is store.DefaultPrincipal, the owner of unauthenticated calls, so no
// token can name it.
func CheckPrincipal(p string) error {
	if p == "" {
		return errors.New("empty principal")
	}
	if len(p) > MaxPrincipalLen {
		return fmt.Errorf("principal longer than %d characters", MaxPrincipalLen)
	}
	for i := 0; i < len(p); i++ {
		if c := p[i]; c <= ' ' || c > '~' || c == ':' {
			return fmt.Errorf("principal %q: only visible ASCII other than ':' is allowed", p)
		}
	}
	return nil
}

// HashToken is the hex SHA-256 of a token: what a token file holds.
func HashToken(token string) string {
	h := sha256.Sum256([]byte(token))
	return hex.EncodeToString(h[:])
}

// compareHashes compares two hashes in constant time; a variable so a test
// can see it is used for every entry.
var compareHashes = subtle.ConstantTimeCompare

// principal returns the principal whose token this is. The token's hash is
// compared with every entry, all of them and in constant time each, so
// the time taken tells nothing about which entry, or how much of one,
// matched.
func (a *Auth) principal(token string) (string, bool) {
	return a.principalOfHash(sha256.Sum256([]byte(token)))
}

// principalOfHash is principal for the token's SHA-256 (what a console
// session keeps instead of the token).
func (a *Auth) principalOfHash(h [sha256.Size]byte) (string, bool) {
	found := -1
	entries := *a.entries.Load()
	for i := range entries {
		if compareHashes(h[:], entries[i].hash[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return "", false
	}
	return entries[found].principal, true
}

// principalKey is the context key of the request's principal.
type principalKey struct{}

// principalOf is the principal a request was authenticated as, or
// store.DefaultPrincipal ("") when auth is off.
func principalOf(ctx context.Context) string {
	p, _ := ctx.Value(principalKey{}).(string)
	return p
}

// openPaths answer without a token: probes need no secret, and say
// nothing about any call.
var openPaths = map[string]bool{wire.PathHealthz: true, wire.PathReadyz: true, wire.PathOpenAPI: true}

// authenticate requires "Authorization: Bearer TOKEN" on every path but
// openPaths when auth is on, and puts the principal in the request's
// context. A missing, malformed or unknown token is 401 unauthenticated
// with WWW-Authenticate (RFC 6750): nothing is read or stored. The token
// never reaches a log line or an error message.
func (s *Server) authenticate(next http.Handler) http.Handler {
	if s.cfg.Auth == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if openPaths[r.URL.Path] || s.consolePath(r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		token, ok := wire.BearerToken(r.Header.Get(wire.HeaderAuthorization))
		if !ok {
			s.m.authFailures.WithLabelValues(authMissing).Inc()
			w.Header().Set(wire.HeaderWWWAuthenticate, `Bearer realm="idemctl"`)
			writeError(w, s.log, http.StatusUnauthorized, wire.CodeUnauthenticated,
				"this server requires Authorization: Bearer TOKEN")
			return
		}
		// A client that failed too often is refused before its token is
		// hashed: guessing costs it time, and the server next to nothing.
		if wait, ok := s.authLimit.Check(r); !ok {
			s.m.authFailures.WithLabelValues(authThrottled).Inc()
			secs := int(wait.Round(time.Second) / time.Second)
			w.Header().Set(wire.HeaderRetryAfter, strconv.Itoa(secs))
			writeError(w, s.log, http.StatusTooManyRequests, codeAuthThrottled,
				fmt.Sprintf("too many failed authentications from this address; retry in %d s", secs))
			return
		}
		principal, known := s.cfg.Auth.principal(token)
		if !known {
			s.m.authFailures.WithLabelValues(authUnknown).Inc()
			s.authLimit.Failed(r) // logged in aggregate by authlimit, never one line per token
			w.Header().Set(wire.HeaderWWWAuthenticate, `Bearer realm="idemctl", error="invalid_token"`)
			writeError(w, s.log, http.StatusUnauthorized, wire.CodeUnauthenticated, "unknown bearer token")
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, principal)))
	})
}

// consolePath reports whether path is the web console's, which
// authenticates its own requests (internal/console: the bearer header as
// here, or its sign-in cookie, which only its pages accept).
func (s *Server) consolePath(path string) bool {
	return !s.cfg.NoUI && (path == console.Prefix || strings.HasPrefix(path, console.Prefix+"/") ||
		strings.HasPrefix(path, console.LegacyPrefix))
}

// consoleAuth is the console's token check: nil without auth.
func (s *Server) consoleAuth() func([sha256.Size]byte) (string, bool) {
	if s.cfg.Auth == nil {
		return nil
	}
	return s.cfg.Auth.principalOfHash
}
