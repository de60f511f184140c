// Package console is idemctl's web console (docs/console.md): the queue at
// a glance with its rates and attempt distribution, the calls with filters,
// and one call's whole story with its audit timeline, served as HTML pages
// under /ui. It renders with html/template, so every key, argument and
// detail is escaped; its only script is its own embedded console.js (the
// Content-Security-Policy forbids inline script and every other origin).
//
// The console reads the store and does one thing: cancel a call, through
// the server's own cancel path (Config.Cancel). It shows the calls of the
// request's principal; the queue, rates and attempt figures are
// server-wide, as GET /stats is.
//
// It authenticates its own requests (auth.go): the API's bearer header,
// or a sign-in session (sessions.go) whose cookie only /ui pages accept.
package console

import (
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"errors"
	"html/template"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/idemctl/idemctl/internal/authlimit"
	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/wire"
)

// Prefix is the path the console is served under: /ui is the overview,
// /ui/... the other pages.
const Prefix = "/ui"

// LegacyPrefix is where the console used to live; its GET requests are
// redirected to the same page under Prefix.
const LegacyPrefix = "/console/"

// Defaults of Config.
const (
	DefaultPageSize    = 50
	DefaultRateMinutes = 30
	DefaultRefresh     = 5 * time.Second
)

//go:embed assets/*.html assets/*.css assets/*.js assets/*.svg
var assets embed.FS

var (
	pages      = template.Must(template.New("").Funcs(funcs).ParseFS(assets, "assets/*.html"))
	stylesheet = mustRead("assets/console.css")
	script     = mustRead("assets/console.js")
	favicon    = mustRead("assets/favicon.svg")
)

func mustRead(name string) []byte {
	b, err := assets.ReadFile(name)
	if err != nil {
		panic(err) // embedded at build time: cannot be missing
	}
	return b
}

// Reader is what the console reads of the store, and all it may: the
// console changes nothing by itself (a cancel goes through Config.Cancel,
// the API's own path). Every store.Store is one.
type Reader interface {
	Get(ctx context.Context, principal, callID string) (store.Call, error)
	GetByKey(ctx context.Context, principal, key string) (store.Call, error)
	ListCalls(ctx context.Context, f store.ListFilter) ([]store.Call, error)
	EffectOf(ctx context.Context, callID string) (store.Effect, error)
	Audit(ctx context.Context, callID string, limit int) ([]store.AuditEvent, error)
	Deliveries(ctx context.Context, callID string) ([]store.Delivery, error)
	Attempts(ctx context.Context) ([]store.AttemptBucket, error)
	Rates(ctx context.Context, minutes int) (store.Rates, error)
	Stats(ctx context.Context) (store.Stats, error)
	Queue(ctx context.Context) (store.Queue, error)
}

var _ Reader = store.Store(nil) // the server hands the console its store

// Config is what the console needs from the server it is part of.
type Config struct {
	// Store is read; the console writes only through Cancel.
	Store Reader
	// Authenticate maps the SHA-256 of a bearer token to its principal
	// (a session keeps the hash, not the token, and asks again on every
	// use). Nil means the server runs without authentication: every
	// request is store.DefaultPrincipal and there is no sign-in.
	Authenticate func(tokenSHA256 [sha256.Size]byte) (principal string, ok bool)
	// AuthLimit throttles failed authentications per client, shared with
	// the API; nil throttles nothing.
	AuthLimit *authlimit.Limiter
	// HTTPS reports whether a request reached the server over HTTPS, for
	// the cookies' Secure flag; nil means TLS on the connection.
	HTTPS func(*http.Request) bool
	// SessionIdle and SessionLifetime end a sign-in session after that
	// long unused, or that long after the sign-in; 0 means
	// DefaultSessionIdle and DefaultSessionLifetime.
	SessionIdle     time.Duration
	SessionLifetime time.Duration
	// AuthFailed is told about each refused credential ("missing" or
	// "unknown"), for the server's metrics; nil ignores them.
	AuthFailed func(reason string)
	// Cancel is the server's cancel path (the same code as POST
	// /v1/tool-calls/{id}/cancel). Required.
	Cancel func(ctx context.Context, principal, callID string) (store.Call, store.CancelOutcome, error)
	// Gates lists the rate-limited and breaker-guarded tools principal
	// may call, with their state (docs/console.md, "Overview"); nil
	// shows none.
	Gates func(ctx context.Context, principal string) ([]Gate, error)
	// ValidCallID reports whether an id has the shape the server hands
	// out; other ids are 404 without a store lookup. Nil accepts any id.
	ValidCallID func(string) bool
	// EncodeCursor and DecodeCursor are the API's opaque cursor codec
	// (GET /v1/tool-calls?after=), so a console link and an API cursor
	// are the same string. Both are required.
	EncodeCursor func(store.Cursor) string
	DecodeCursor func(string) (store.Cursor, error)
	// PageSize is how many calls a list page shows; 0 means DefaultPageSize.
	PageSize int
	// RateMinutes is the overview's rate window; 0 means DefaultRateMinutes.
	RateMinutes int
	// Refresh is how often the overview refreshes itself; 0 means
	// DefaultRefresh.
	Refresh time.Duration
	// Logger receives store errors; nil discards them.
	Logger *slog.Logger
}

type console struct {
	cfg      Config
	log      *slog.Logger
	sessions *sessions
}

// New returns the console's handler for Prefix, everything under it, and
// LegacyPrefix.
func New(cfg Config) http.Handler {
	if cfg.ValidCallID == nil {
		cfg.ValidCallID = func(string) bool { return true }
	}
	if cfg.PageSize <= 0 {
		cfg.PageSize = DefaultPageSize
	}
	if cfg.RateMinutes <= 0 {
		cfg.RateMinutes = DefaultRateMinutes
	}
	if cfg.Refresh <= 0 {
		cfg.Refresh = DefaultRefresh
	}
	if cfg.AuthFailed == nil {
		cfg.AuthFailed = func(string) {}
	}
	if cfg.HTTPS == nil {
		cfg.HTTPS = func(r *http.Request) bool { return r.TLS != nil }
	}
	if cfg.SessionIdle <= 0 {
		cfg.SessionIdle = DefaultSessionIdle
	}
	if cfg.SessionLifetime <= 0 {
		cfg.SessionLifetime = DefaultSessionLifetime
	}
	c := &console{cfg: cfg, log: cfg.Logger, sessions: newSessions(cfg.SessionIdle, cfg.SessionLifetime, time.Now)}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	mux := http.NewServeMux()
	// Open: the sign-in page and the static files.
	mux.HandleFunc("GET "+Prefix+"/signin", c.signinPage)
	mux.HandleFunc("POST "+Prefix+"/signin", c.signin)
	mux.HandleFunc("GET "+Prefix+"/static/console.css", static("text/css; charset=utf-8", stylesheet))
	mux.HandleFunc("GET "+Prefix+"/static/console.js", static("text/javascript; charset=utf-8", script))
	mux.HandleFunc("GET "+Prefix+"/static/favicon.svg", static("image/svg+xml", favicon))
	// Everything else needs a principal.
	mux.Handle("POST "+Prefix+"/signout", c.authed(c.signout))
	mux.Handle("GET "+Prefix, c.authed(c.overview))
	mux.Handle("GET "+Prefix+"/{$}", c.authed(c.overview))
	mux.Handle("GET "+Prefix+"/calls", c.authed(c.calls))
	mux.Handle("GET "+Prefix+"/search", c.authed(c.search))
	mux.Handle("GET "+Prefix+"/calls/{call_id}", c.authed(c.call))
	mux.Handle("GET "+Prefix+"/calls/{call_id}/cancel", c.authed(c.cancelPage))
	mux.Handle("POST "+Prefix+"/calls/{call_id}/cancel", c.authed(c.cancel))
	mux.HandleFunc(LegacyPrefix, legacyRedirect)
	mux.HandleFunc(Prefix+"/", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set(wire.HeaderAllow, "GET, HEAD")
			c.fail(w, r, http.StatusMethodNotAllowed, "This page only answers GET.")
			return
		}
		c.fail(w, r, http.StatusNotFound, "No such page.")
	})
	return secureHeaders(mux)
}

// legacyRedirect sends /console/... to the same page under /ui (a query
// on /console/ was the old overview's list: /ui/calls) (308, so a
// bookmark keeps working and says where the page lives now).
func legacyRedirect(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set(wire.HeaderAllow, "GET, HEAD")
		http.Error(w, "the console moved to "+Prefix, http.StatusMethodNotAllowed)
		return
	}
	rest := strings.TrimPrefix(r.URL.Path, LegacyPrefix)
	target := Prefix
	if rest != "" {
		target += "/" + rest
	} else if r.URL.RawQuery != "" {
		target += "/calls" // the old overview's list and its filters
	}
	if r.URL.RawQuery != "" {
		target += "?" + r.URL.RawQuery
	}
	http.Redirect(w, r, target, http.StatusPermanentRedirect)
}

func static(contentType string, body []byte) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", contentType)
		_, _ = w.Write(body)
	}
}

// CSP is every console response's Content-Security-Policy: the console's
// own stylesheet and script only (no inline script, no other origin),
// fetches to itself (the overview's refresh), no framing, forms only to
// itself.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

// secureHeaders sets the headers every console response carries, and no
// caching, since pages show one principal's calls. The referrer policy is
// same-origin, not no-referrer: under no-referrer a browser sends
// "Origin: null" with the console's own form posts, which checkPost must
// refuse, and no other site gets a referrer either way.
func secureHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", CSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "same-origin")
		h.Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}

// page is what every page template gets: the page's own data and the
// layout's (who is signed in, the CSRF token for its forms).
type page struct {
	Title string
	// Nav is the active tab: "overview" or "calls".
	Nav string
	// SignedIn: the request came with a sign-in session (a sign-out
	// button is shown).
	SignedIn bool
	// CSRF is the token the page's forms carry.
	CSRF string
	// Refresh is the overview's refresh period in seconds (0: none).
	Refresh int
	Data    any
}

// render executes a page into a buffer first, so a template error is a
// clean 500 rather than half a page.
func (c *console) render(w http.ResponseWriter, r *http.Request, status int, name string, p page) {
	if s := sessionOf(r); s != nil {
		p.SignedIn = s.id != ""
		p.CSRF = c.csrfToken(w, r, s)
	}
	var buf bytes.Buffer
	if err := pages.ExecuteTemplate(&buf, name, p); err != nil {
		c.log.Error("console: rendering", "page", name, "error", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = buf.WriteTo(w)
}

type errorData struct {
	Status  int
	Text    string
	Message string
}

// fail answers with an error page.
func (c *console) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	c.render(w, r, status, "error.html", page{Title: http.StatusText(status),
		Data: errorData{Status: status, Text: http.StatusText(status), Message: msg}})
}

// storeError is 503 for a database that cannot answer now, 500 otherwise;
// the detail goes to the log, not the page.
func (c *console) storeError(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, store.ErrUnavailable) {
		c.fail(w, r, http.StatusServiceUnavailable, "The database cannot answer now; try again shortly.")
		return
	}
	if r.Context().Err() != nil {
		return // the client went away
	}
	c.log.Error("console: store", "error", err)
	c.fail(w, r, http.StatusInternalServerError, "The console could not read the store; see the server's log.")
}
