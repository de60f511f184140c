// Package webhook delivers a call's final state to the URL the call named
// (docs/api.md, "Completion webhooks"): the allow-list that decides which
// URLs a call may name, with each endpoint's signing secret (Allow), and
// the delivery loop that sends the store's outbox (Deliverer).
package webhook

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"strings"
)

// MaxURLLen bounds a notify_url.
const MaxURLLen = 2048

// Endpoint is one --webhook-allow entry: a URL pattern and the secret
// deliveries to matching URLs are signed with.
type Endpoint struct {
	// Pattern is the entry's pattern as given (no secret in it).
	Pattern string
	scheme  string
	// host is lowercase; wildcard: the pattern's host was "*." + host,
	// matching any name below it (not host itself).
	host     string
	wildcard bool
	port     string
	path     string
	secret   []byte
}

// Allow is the allow-list of a server: the endpoints calls may name, and
// each principal's default endpoint. The zero Allow allows nothing:
// webhooks are off.
type Allow struct {
	endpoints []Endpoint
	// defaults maps a principal (or "*", every principal without its
	// own) to its default notify_url.
	defaults map[string]string
}

// ErrNotAllowed is the class of every refusal of a notify_url.
var ErrNotAllowed = errors.New("notify_url not allowed")

var secretRef = regexp.MustCompile(`^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$`)

// ParseEndpoint reads one --webhook-allow entry: "PATTERN ${VAR}", the
// pattern an absolute http(s) URL whose host may begin with "*." and
// whose path is a prefix, and the secret the value of the environment
// variable VAR (looked up with getenv; never a literal, so no secret
// stands in a process listing or a config file). Errors never quote the
// secret.
func ParseEndpoint(entry string, getenv func(string) string) (Endpoint, error) {
	pattern, ref, ok := strings.Cut(strings.TrimSpace(entry), " ")
	ref = strings.TrimSpace(ref)
	if !ok || ref == "" {
		return Endpoint{}, fmt.Errorf("webhook allow %q: want \"PATTERN ${VAR}\": every endpoint needs a signing secret, read from the environment variable VAR", pattern)
	}
	m := secretRef.FindStringSubmatch(ref)
	if m == nil {
		return Endpoint{}, fmt.Errorf("webhook allow %q: the secret must be given as ${VAR}, the name of an environment variable holding it, not the secret itself", pattern)
	}
	secret := getenv(m[1])
	if secret == "" {
		return Endpoint{}, fmt.Errorf("webhook allow %q: the secret's environment variable %s is not set or empty", pattern, m[1])
	}
	e := Endpoint{Pattern: pattern, secret: []byte(secret)}
	u, err := url.Parse(pattern)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
		u.RawQuery != "" || u.Fragment != "" {
		return Endpoint{}, fmt.Errorf("webhook allow %q: a pattern is an absolute http or https URL without user, query or fragment, like https://hooks.example.com/idemctl/ or https://*.example.com/", pattern)
	}
	e.scheme = u.Scheme
	e.host, e.port = strings.ToLower(u.Hostname()), portOf(u)
	if rest, ok := strings.CutPrefix(e.host, "*."); ok {
		e.host, e.wildcard = rest, true
	}
	if e.host == "" || strings.Contains(e.host, "*") {
		return Endpoint{}, fmt.Errorf("webhook allow %q: '*' may only begin the host, as in *.example.com", pattern)
	}
	e.path = u.EscapedPath()
	return e, nil
}

// EnvSecrets is ParseEndpoint's getenv in production.
var EnvSecrets = os.Getenv

// portOf is u's port, or its scheme's default.
func portOf(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	if u.Scheme == "https" {
		return "443"
	}
	return "80"
}

// NewAllow builds an allow-list from endpoints and default entries
// ("PRINCIPAL=URL", PRINCIPAL "*" for every principal without its own).
// Each default URL must be allowed by the endpoints.
func NewAllow(endpoints []Endpoint, defaults []string) (*Allow, error) {
	a := &Allow{endpoints: endpoints, defaults: map[string]string{}}
	for _, d := range defaults {
		principal, u, ok := strings.Cut(d, "=")
		if !ok || principal == "" || u == "" {
			return nil, fmt.Errorf("webhook default %q: want PRINCIPAL=URL (PRINCIPAL * for every principal without its own)", d)
		}
		if _, dup := a.defaults[principal]; dup {
			return nil, fmt.Errorf("webhook default: principal %q has two default endpoints", principal)
		}
		if err := a.Check(u); err != nil {
			return nil, fmt.Errorf("webhook default for %q: %w", principal, err)
		}
		a.defaults[principal] = u
	}
	return a, nil
}

// Enabled reports whether any URL is allowed.
func (a *Allow) Enabled() bool { return a != nil && len(a.endpoints) > 0 }

// Endpoints is how many patterns are allowed.
func (a *Allow) Endpoints() int {
	if a == nil {
		return 0
	}
	return len(a.endpoints)
}

// Default is principal's default notify_url (its own, else "*"'s), or nil.
func (a *Allow) Default(principal string) *string {
	if a == nil {
		return nil
	}
	if u, ok := a.defaults[principal]; ok {
		return &u
	}
	if u, ok := a.defaults["*"]; ok {
		return &u
	}
	return nil
}

// Check refuses a notify_url that may not be named: webhooks off, not an
// absolute http(s) URL, a user or fragment in it, too long, or no pattern
// matching it. The error wraps ErrNotAllowed and says which.
func (a *Allow) Check(raw string) error {
	_, err := a.match(raw)
	return err
}

// secret is the signing secret of the first endpoint matching raw.
func (a *Allow) secret(raw string) ([]byte, error) {
	e, err := a.match(raw)
	if err != nil {
		return nil, err
	}
	return e.secret, nil
}

func (a *Allow) match(raw string) (Endpoint, error) {
	if !a.Enabled() {
		return Endpoint{}, fmt.Errorf("%w: this server delivers no webhooks (it was started without --webhook-allow)", ErrNotAllowed)
	}
	if len(raw) > MaxURLLen {
		return Endpoint{}, fmt.Errorf("%w: it is %d bytes; at most %d are allowed", ErrNotAllowed, len(raw), MaxURLLen)
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Opaque != "" {
		return Endpoint{}, fmt.Errorf("%w: it must be an absolute http or https URL", ErrNotAllowed)
	}
	if u.User != nil || u.Fragment != "" || strings.Contains(raw, "#") {
		return Endpoint{}, fmt.Errorf("%w: it may hold no user information and no fragment", ErrNotAllowed)
	}
	host := strings.ToLower(u.Hostname())
	if host == "" || (strings.Contains(host, ":") && net.ParseIP(host) == nil) {
		return Endpoint{}, fmt.Errorf("%w: it names no valid host", ErrNotAllowed)
	}
	for seg := range strings.SplitSeq(u.Path, "/") {
		if seg == "." || seg == ".." {
			// A receiver would resolve it to a path the pattern may not allow.
			return Endpoint{}, fmt.Errorf("%w: its path may hold no . or .. segment", ErrNotAllowed)
		}
	}
	port, path := portOf(u), u.EscapedPath()
	for _, e := range a.endpoints {
		if e.matches(u.Scheme, host, port, path) {
			return e, nil
		}
	}
	return Endpoint{}, fmt.Errorf("%w: no --webhook-allow pattern of this server matches it", ErrNotAllowed)
}

func (e Endpoint) matches(scheme, host, port, path string) bool {
	if scheme != e.scheme || port != e.port {
		return false
	}
	if e.wildcard {
		if !strings.HasSuffix(host, "."+e.host) {
			return false
		}
	} else if host != e.host {
		return false
	}
	return pathUnder(path, e.path)
}

// pathUnder reports whether path is prefix or below it, segment-wise:
// "/hooks" allows "/hooks" and "/hooks/x", not "/hooksx".
func pathUnder(path, prefix string) bool {
	prefix = strings.TrimSuffix(prefix, "/")
	if prefix == "" {
		return true
	}
	return path == prefix || strings.HasPrefix(path, prefix+"/")
}
