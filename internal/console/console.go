// Package console is idemctl's read-only web console (docs/console.md):
// the queue at a glance, the newest calls, and one call's whole story with
// its audit timeline, served as plain HTML pages under /console/. It
// renders with html/template, so every key, argument and detail is
// escaped; it has no JavaScript and loads nothing but its own embedded
// stylesheet.
//
// The console only reads the store. It shows the calls of the request's
// principal (the server's authentication decides who that is); the queue
// summary is server-wide, as GET /stats is.
package console

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/idemctl/idemctl/internal/store"
)

// Prefix is the path the console is served under.
const Prefix = "/console/"

// DefaultPageSize is how many calls the overview lists per page.
const DefaultPageSize = 50

//go:embed assets/*.html assets/*.css
var assets embed.FS

var (
	pages = template.Must(template.New("").Funcs(template.FuncMap{
		"ts":      formatTS,
		"elapsed": func(d float64) string { return fmt.Sprintf("+%.3fs", d) },
		"deref":   deref,
		"derefI":  func(p *int64) string { return derefInt(p) },
		"derefTS": func(p *float64) string { return derefTS(p) },
		"pretty":  prettyJSON,
		"age":     func(d time.Duration) string { return d.Round(time.Millisecond).String() },
		// page is a link to the overview with v as its query. html/template
		// would escape '=' and '&' in a value placed after '?'; the values
		// are encoded here, and the path is ours, so the URL is safe.
		"page": func(v url.Values) template.URL { return template.URL(Prefix + "?" + v.Encode()) },
	}).ParseFS(assets, "assets/*.html"))
	stylesheet = mustRead("assets/console.css")
)

func mustRead(name string) []byte {
	b, err := assets.ReadFile(name)
	if err != nil {
		panic(err) // embedded at build time: cannot be missing
	}
	return b
}

// Config is what the console needs from the server it is part of.
type Config struct {
	// Store is read, never written.
	Store store.Store
	// Principal is the principal a request was authenticated as
	// (store.DefaultPrincipal without authentication). Nil means
	// store.DefaultPrincipal for every request.
	Principal func(*http.Request) string
	// ValidCallID reports whether an id has the shape the server hands
	// out; other ids are 404 without a store lookup. Nil accepts any id.
	ValidCallID func(string) bool
	// EncodeCursor and DecodeCursor are the API's opaque cursor codec
	// (GET /v1/tool-calls?after=), so a console link and an API cursor
	// are the same string. Both are required.
	EncodeCursor func(store.Cursor) string
	DecodeCursor func(string) (store.Cursor, error)
	// PageSize is how many calls a page lists; 0 means DefaultPageSize.
	PageSize int
	// Logger receives store errors; nil discards them.
	Logger *slog.Logger
}

type console struct {
	cfg Config
	log *slog.Logger
}

// New returns the console's handler for every path under Prefix.
func New(cfg Config) http.Handler {
	if cfg.Principal == nil {
		cfg.Principal = func(*http.Request) string { return store.DefaultPrincipal }
	}
	if cfg.ValidCallID == nil {
		cfg.ValidCallID = func(string) bool { return true }
	}
	if cfg.PageSize <= 0 {
		cfg.PageSize = DefaultPageSize
	}
	c := &console{cfg: cfg, log: cfg.Logger}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+Prefix+"{$}", c.overview)
	mux.HandleFunc("GET "+Prefix+"calls/{call_id}", c.call)
	mux.HandleFunc("GET "+Prefix+"style.css", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/css; charset=utf-8")
		_, _ = w.Write(stylesheet)
	})
	mux.HandleFunc(Prefix, func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			c.fail(w, http.StatusMethodNotAllowed, "The console is read-only: only GET is allowed.")
			return
		}
		c.fail(w, http.StatusNotFound, "No such page.")
	})
	return secureHeaders(mux)
}

// secureHeaders sets the headers every console response carries: a
// Content-Security-Policy that allows nothing but the console's own
// stylesheet (no script at all, no framing, forms only to itself), and no
// caching, since pages show one principal's calls.
func secureHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}

// overviewData is the overview page's model.
type overviewData struct {
	Stats    store.Stats
	Statuses []store.Status
	Queue    store.Queue
	Status   string
	Tool     string
	Calls    []store.Call
	Next     url.Values // nil on the last page
	First    url.Values // nil on the first page
}

// overview is GET /console/?status=&tool=&after=: the queue and the
// principal's newest calls, a page at a time (keyset, as the API's list).
func (c *console) overview(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	q := r.URL.Query()
	principal := c.cfg.Principal(r)
	d := overviewData{Statuses: store.Statuses, Status: q.Get("status"), Tool: q.Get("tool")}
	f := store.ListFilter{Principal: &principal, Tool: d.Tool, Limit: c.cfg.PageSize + 1}
	if d.Status != "" {
		if st := store.Status(d.Status); !st.Valid() {
			c.fail(w, http.StatusBadRequest, "status must be pending, running, succeeded or failed.")
			return
		}
		f.Status = store.Status(d.Status)
	}
	if a := q.Get("after"); a != "" {
		cur, err := c.cfg.DecodeCursor(a)
		if err != nil {
			c.fail(w, http.StatusBadRequest, "The page cursor (after) is not one this console made.")
			return
		}
		f.After = &cur
		d.First = filterValues(d.Status, d.Tool)
	}
	var err error
	if d.Stats, err = c.cfg.Store.Stats(ctx); err != nil {
		c.storeError(ctx, w, err)
		return
	}
	if d.Queue, err = c.cfg.Store.Queue(ctx); err != nil {
		c.storeError(ctx, w, err)
		return
	}
	if d.Calls, err = c.cfg.Store.ListCalls(ctx, f); err != nil {
		c.storeError(ctx, w, err)
		return
	}
	// One call more than a page tells whether there is a next page.
	if len(d.Calls) > c.cfg.PageSize {
		d.Calls = d.Calls[:c.cfg.PageSize]
		d.Next = filterValues(d.Status, d.Tool)
		d.Next.Set("after", c.cfg.EncodeCursor(store.CursorOf(d.Calls[len(d.Calls)-1])))
	}
	c.render(w, "overview.html", d)
}

func filterValues(status, tool string) url.Values {
	v := url.Values{}
	if status != "" {
		v.Set("status", status)
	}
	if tool != "" {
		v.Set("tool", tool)
	}
	return v
}

// timelineRow is one audit event with its time since the first.
type timelineRow struct {
	store.AuditEvent
	Elapsed float64
}

// callData is the call page's model.
type callData struct {
	Call     store.Call
	Timeline []timelineRow
}

// call is GET /console/calls/{call_id}: the call's fields, its result or
// error, its effect and its audit timeline. Another principal's call is
// not found, exactly as in the API.
func (c *console) call(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id := r.PathValue("call_id")
	if !c.cfg.ValidCallID(id) {
		c.fail(w, http.StatusNotFound, "No such call.")
		return
	}
	call, err := c.cfg.Store.Get(ctx, id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && call.Principal != c.cfg.Principal(r)) {
		c.fail(w, http.StatusNotFound, "No such call.")
		return
	}
	if err != nil {
		c.storeError(ctx, w, err)
		return
	}
	events, err := c.cfg.Store.Audit(ctx, id, 0) // the whole timeline
	if err != nil {
		c.storeError(ctx, w, err)
		return
	}
	d := callData{Call: call}
	for _, e := range events {
		d.Timeline = append(d.Timeline, timelineRow{AuditEvent: e, Elapsed: e.TS - events[0].TS})
	}
	c.render(w, "call.html", d)
}

// render executes a page into a buffer first, so a template error is a
// clean 500 rather than half a page.
func (c *console) render(w http.ResponseWriter, name string, data any) {
	var buf bytes.Buffer
	if err := pages.ExecuteTemplate(&buf, name, data); err != nil {
		c.log.Error("console: rendering", "page", name, "error", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = buf.WriteTo(w)
}

// fail answers with an error page.
func (c *console) fail(w http.ResponseWriter, status int, msg string) {
	var buf bytes.Buffer
	if err := pages.ExecuteTemplate(&buf, "error.html", map[string]any{
		"Status": status, "Text": http.StatusText(status), "Message": msg,
	}); err != nil {
		c.log.Error("console: rendering", "page", "error.html", "error", err)
		http.Error(w, http.StatusText(status), status)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = buf.WriteTo(w)
}

// storeError is 503 for a database that cannot answer now, 500 otherwise;
// the detail goes to the log, not the page.
func (c *console) storeError(ctx context.Context, w http.ResponseWriter, err error) {
	if errors.Is(err, store.ErrUnavailable) {
		c.fail(w, http.StatusServiceUnavailable, "The database cannot answer now; try again shortly.")
		return
	}
	if ctx.Err() != nil {
		return // the client went away
	}
	c.log.Error("console: store", "error", err)
	c.fail(w, http.StatusInternalServerError, "The console could not read the store; see the server's log.")
}

// formatTS is Unix seconds as UTC with milliseconds, as inspect prints them.
func formatTS(ts float64) string {
	sec := int64(ts)
	return time.Unix(sec, int64((ts-float64(sec))*1e9)).UTC().Format("2006-01-02 15:04:05.000")
}

func deref(p *string) string {
	if p == nil {
		return "—"
	}
	return *p
}

func derefInt(p *int64) string {
	if p == nil {
		return "—"
	}
	return strconv.FormatInt(*p, 10)
}

func derefTS(p *float64) string {
	if p == nil {
		return "—"
	}
	return formatTS(*p)
}

// prettyJSON indents stored JSON for reading; anything that is not JSON
// is shown as it is (the template escapes it either way).
func prettyJSON(raw json.RawMessage) string {
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		return string(raw)
	}
	return buf.String()
}
