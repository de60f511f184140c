package toolreg

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemctl/idemctl/internal/httptool"
	"github.com/idemctl/idemctl/internal/tool"
	"github.com/idemctl/idemctl/internal/tool/mcptool"
	"github.com/idemctl/idemctl/internal/wire"
)

// The mcp kind (docs/tools.md, "The mcp kind"): an entry names an
// upstream MCP server, and its tools are imported from the upstream's
// tools/list by Refresh, at start, at an interval and on SIGHUP. The
// file's own tools never change while the server runs; the imported ones
// are swapped in whole by each refresh.

// Errors of the mcp kind.
var (
	// ErrUpstreamUnavailable: the call names a tool of an upstream whose
	// list is not loaded (the upstream has been down since the server
	// started), or a tool the entry's allow-list or rename names that the
	// upstream does not offer yet. The server answers 503.
	ErrUpstreamUnavailable = errors.New("the tool's upstream MCP server has not listed it yet; retry later")
	// ErrBadImport: an upstream offers a tool the registry cannot take
	// (its name or its schema). At start it stops the server.
	ErrBadImport = errors.New("cannot import an upstream tool")
)

// upstreamEntry is one mcp entry of the tools file.
type upstreamEntry struct {
	name   string
	up     *mcptool.Upstream
	allow  []string          // nil: every tool
	rename map[string]string // upstream name → idemctl name
	// base holds the entry's policy, copied into each imported tool.
	base Tool
}

// importSet is one refresh's result.
type importSet struct {
	tools  map[string]*Tool
	list   []*Tool         // sorted by name
	loaded map[string]bool // entries whose list was loaded at least once
	last   map[string][]*Tool
}

// imports are a registry's mcp entries and their current tools.
type imports struct {
	entries []*upstreamEntry
	mu      sync.Mutex // one refresh at a time
	cur     atomic.Pointer[importSet]
	// onRefresh are called after each refresh, under mu.
	onRefresh []func()
	// refreshed is when the last refresh began (unix nanoseconds).
	refreshed atomic.Int64
}

// missRefreshAge is how old the lists may be before a call of an imported
// tool that is not listed here reads them again instead of failing: an
// instance whose last refresh predates the upstream's new tool must not
// fail a call that another instance accepted for it.
const missRefreshAge = time.Second

// OnRefresh registers f to be called after every Refresh has swapped the
// imported tools in (the MCP door re-registers its tools). Calls of f do
// not overlap.
func (r *Registry) OnRefresh(f func()) {
	if r.up == nil {
		return
	}
	r.up.mu.Lock()
	defer r.up.mu.Unlock()
	r.up.onRefresh = append(r.up.onRefresh, f)
}

var emptyImports = &importSet{}

func (im *imports) current() *importSet {
	if s := im.cur.Load(); s != nil {
		return s
	}
	return emptyImports
}

// parseMCP reads an mcp entry's own fields; t holds its policy.
func parseMCP(e toolEntry, t *Tool, getenv func(string) (string, bool), where string, bad func(field, format string, a ...any) error) (*upstreamEntry, error) {
	cfg := mcptool.Config{Name: t.Name, Timeout: t.Timeout}
	if e.URL.set == e.Command.set {
		return nil, bad("url", "an mcp entry needs exactly one of url (streamable HTTP) and command (a stdio server)")
	}
	if e.URL.set {
		if !e.URL.ok {
			return nil, bad("url", "must be a string, got %s", show(e.URL.raw))
		}
		cfg.URL = e.URL.val
	} else {
		if !e.Command.ok || len(e.Command.val) == 0 {
			return nil, bad("command", "must be a non-empty list of strings (the program and its arguments)")
		}
		for _, a := range e.Command.val {
			s, ok := a.(string)
			if !ok || s == "" {
				return nil, bad("command", "%s is not a non-empty string", show(a))
			}
			cfg.Command = append(cfg.Command, s)
		}
	}
	if e.Headers.set {
		if !e.Headers.ok {
			return nil, bad("headers", "must be a mapping of header name to value")
		}
		for _, hn := range slices.Sorted(maps.Keys(e.Headers.val)) {
			val, err := secretValue(e.Headers.val[hn], getenv, &cfg.Redact)
			if err != nil {
				return nil, bad("headers."+hn, "%v", err)
			}
			cfg.Headers = append(cfg.Headers, httptool.Header{Name: hn, Value: val})
		}
	}
	if e.Env.set {
		if !e.Env.ok {
			return nil, bad("env", "must be a mapping of variable name to value")
		}
		for _, n := range slices.Sorted(maps.Keys(e.Env.val)) {
			if !varName.MatchString(n) {
				return nil, bad("env."+n, "not a variable name")
			}
			val, err := secretValue(e.Env.val[n], getenv, &cfg.Redact)
			if err != nil {
				return nil, bad("env."+n, "%v", err)
			}
			cfg.Env = append(cfg.Env, mcptool.EnvVar{Name: n, Value: val})
		}
	}
	ue := &upstreamEntry{name: t.Name, base: *t}
	if e.Tools.set {
		if !e.Tools.ok || len(e.Tools.val) == 0 {
			return nil, bad("tools", "must be a non-empty list of the upstream's tool names (leave it out to import every tool)")
		}
		for _, a := range e.Tools.val {
			s, ok := a.(string)
			if !ok || s == "" {
				return nil, bad("tools", "%s is not a tool name", show(a))
			}
			ue.allow = append(ue.allow, s)
		}
	}
	if e.Rename.set {
		if !e.Rename.ok {
			return nil, bad("rename", "must be a mapping of the upstream's tool name to the name in idemctl")
		}
		ue.rename = map[string]string{}
		for _, k := range slices.Sorted(maps.Keys(e.Rename.val)) {
			s, ok := e.Rename.val[k].(string)
			if !ok || !namePattern.MatchString(s) {
				return nil, bad("rename."+k, "%s must be 1 to 64 letters, digits, '_' or '-'", show(e.Rename.val[k]))
			}
			ue.rename[k] = s
		}
	}
	up, err := mcptool.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	ue.up = up
	return ue, nil
}

// secretValue expands a header or env value; what came from the
// environment is added to redact, alone and as the value it makes up.
func secretValue(v any, getenv func(string) (string, bool), redact *[]httptool.Secret) (httptool.Secret, error) {
	s, ok := v.(string)
	if !ok {
		// The value's type only: a value may be a secret.
		return httptool.Secret{}, fmt.Errorf("must be a string, got a %T", v)
	}
	val, vars, err := expand(s, getenv)
	if err != nil {
		return httptool.Secret{}, err
	}
	if len(vars) > 0 {
		*redact = append(*redact, httptool.NewSecret(val))
		for _, x := range vars {
			*redact = append(*redact, httptool.NewSecret(x))
		}
	}
	return httptool.NewSecret(val), nil
}

// Upstreams names the file's mcp entries, in file order.
func (r *Registry) Upstreams() []string {
	if r.up == nil {
		return nil
	}
	var out []string
	for _, e := range r.up.entries {
		out = append(out, e.name)
	}
	return out
}

// SetLog gives the upstreams the server's logger (a stdio server's
// stderr, reconnections).
func (r *Registry) SetLog(l *slog.Logger) {
	if r.up == nil {
		return
	}
	for _, e := range r.up.entries {
		e.up.SetLog(l)
	}
}

// Close ends the upstream connections and stops the stdio servers.
func (r *Registry) Close() error {
	if r.up == nil {
		return nil
	}
	var errs []error
	for _, e := range r.up.entries {
		errs = append(errs, e.up.Close())
	}
	return errors.Join(errs...)
}

// Refresh lists every upstream's tools (at once, so one slow upstream
// does not hold the others back) and swaps the imported tools in. An
// upstream that does not answer keeps the tools of its last listing (or
// none, if it never answered); its error is returned, joined with the
// others. A tool the registry cannot take is returned as ErrBadImport and
// left out.
func (r *Registry) Refresh(ctx context.Context) error {
	if r.up == nil {
		return nil
	}
	im := r.up
	im.mu.Lock()
	defer im.mu.Unlock()
	return r.refreshLocked(ctx)
}

func (r *Registry) refreshLocked(ctx context.Context) error {
	im := r.up
	im.refreshed.Store(time.Now().UnixNano())
	prev := im.current()
	lists := make([][]*mcp.Tool, len(im.entries))
	errs := make([]error, len(im.entries))
	var wg sync.WaitGroup
	for i, e := range im.entries {
		wg.Go(func() { lists[i], errs[i] = e.up.List(ctx) })
	}
	wg.Wait()

	next := &importSet{tools: map[string]*Tool{}, loaded: map[string]bool{}, last: map[string][]*Tool{}}
	var bad []error
	for i, e := range im.entries {
		if errs[i] != nil {
			errs[i] = fmt.Errorf("mcp upstream %s: listing its tools: %w", e.name, errs[i])
			next.loaded[e.name] = prev.loaded[e.name]
			next.last[e.name] = prev.last[e.name]
			continue
		}
		next.loaded[e.name] = true
		var got []*Tool
		for _, mt := range lists[i] {
			if e.allow != nil && !slices.Contains(e.allow, mt.Name) {
				continue
			}
			t, err := e.importTool(mt)
			if err != nil {
				bad = append(bad, err)
				continue
			}
			got = append(got, t)
		}
		next.last[e.name] = got
	}
	for _, e := range im.entries {
		for _, t := range next.last[e.name] {
			switch _, static := r.tools[t.Name]; {
			case static:
				bad = append(bad, fmt.Errorf("%w: mcp upstream %s: tool %q: the name is taken by another tool (rename it with the entry's rename)", ErrBadImport, e.name, t.Name))
				continue
			case next.tools[t.Name] != nil:
				bad = append(bad, fmt.Errorf("%w: mcp upstream %s: tool %q: the name is taken by mcp upstream %s's tool (rename one with rename)", ErrBadImport, e.name, t.Name, next.tools[t.Name].Upstream))
				continue
			}
			next.tools[t.Name] = t
			next.list = append(next.list, t)
		}
	}
	slices.SortFunc(next.list, func(a, b *Tool) int { return strings.Compare(a.Name, b.Name) })
	im.cur.Store(next)
	for _, f := range im.onRefresh {
		f()
	}
	return errors.Join(append(bad, errs...)...)
}

// refreshForMiss reads the upstreams' lists again when a call names an
// imported tool this instance does not list and its lists are older than
// missRefreshAge (one refresh serves every call that waited for it).
func (r *Registry) refreshForMiss(ctx context.Context) {
	im := r.up
	stale := func() bool { return time.Since(time.Unix(0, im.refreshed.Load())) >= missRefreshAge }
	if !stale() {
		return
	}
	im.mu.Lock()
	defer im.mu.Unlock()
	if stale() {
		_ = r.refreshLocked(ctx) // a failed listing keeps the last lists; missing judges by them
	}
}

// localName is the name in idemctl of the upstream's tool.
func (e *upstreamEntry) localName(upstreamName string) string {
	if n, ok := e.rename[upstreamName]; ok {
		return n
	}
	return e.name + "_" + upstreamName
}

// importTool makes a registry tool of one of the upstream's tools.
func (e *upstreamEntry) importTool(mt *mcp.Tool) (*Tool, error) {
	name := e.localName(mt.Name)
	where := fmt.Sprintf("mcp upstream %s: tool %q", e.name, mt.Name)
	if !namePattern.MatchString(name) {
		return nil, fmt.Errorf("%w: %s: its name in idemctl, %q, is not 1 to 64 letters, digits, '_' or '-' (give it another with the entry's rename)", ErrBadImport, where, name)
	}
	t := e.base // the entry's policy
	t.Name, t.Kind, t.Upstream, t.upstream = name, KindMCP, e.name, nil
	t.Description = mt.Description
	schema := []byte(`{"type":"object"}`)
	if mt.InputSchema != nil {
		b, err := json.Marshal(mt.InputSchema)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: inputSchema: %v", ErrBadImport, where, err)
		}
		schema = b
	}
	sch, schemaJSON, err := compileSchema(name, schema)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: inputSchema: %v", ErrBadImport, where, err)
	}
	t.schema, t.schemaJSON = sch, schemaJSON
	// A tool the upstream says only reads records no effect row, unless
	// the entry says effect.
	t.Effect = true
	if a := mt.Annotations; a != nil {
		if b, err := json.Marshal(a); err == nil {
			t.Annotations = b
		}
		t.Effect = !a.ReadOnlyHint
		t.Destructive = a.DestructiveHint
	}
	if e.base.effectSet {
		t.Effect = e.base.Effect
	}
	t.runner = mcptool.Runner{Up: e.up, Tool: mt.Name, Name: name, Effect: t.Effect, Hold: t.OnUnknown == OnUnknownHold}
	return &t, nil
}

// Unavailable reports whether name is a tool of an upstream that is not
// listed yet: the upstream has not answered since the server started, or
// the entry names it (allow-list, rename) and the upstream does not offer
// it (yet).
func (r *Registry) Unavailable(name string) bool {
	if r.up == nil {
		return false
	}
	cur := r.up.current()
	if _, ok := cur.tools[name]; ok {
		return false
	}
	for _, e := range r.up.entries {
		if r.viewer != nil && !e.base.Allows(*r.viewer) {
			continue
		}
		if !cur.loaded[e.name] && strings.HasPrefix(name, e.name+"_") {
			return true
		}
		for _, a := range e.allow {
			if e.localName(a) == name {
				return true
			}
		}
		for _, n := range e.rename {
			if n == name {
				return true
			}
		}
	}
	return false
}

// missing is the outcome of an accepted call whose imported tool is not
// listed now: retryable while its upstream has not answered since the
// server started, final once the upstream's list leaves it out.
func (im *imports) missing(name string) (tool.Outcome, bool) {
	e := im.owner(name)
	if e == nil {
		return tool.Outcome{}, false
	}
	if !im.current().loaded[e.name] {
		return tool.Outcome{Err: &tool.ToolError{Code: wire.CodeUpstreamUnreachable, Retryable: true,
			Message: "the tool's upstream MCP server has not answered since the server started"}}, true
	}
	return tool.Outcome{Err: &tool.ToolError{Code: wire.CodeUpstreamToolGone, Retryable: false,
		Message: fmt.Sprintf("the upstream MCP server %s no longer offers this tool", e.name)}}, true
}

// owner is the entry whose tool name would be (its prefix, or a rename),
// nil if none.
func (im *imports) owner(name string) *upstreamEntry {
	if im == nil {
		return nil
	}
	for _, e := range im.entries {
		if strings.HasPrefix(name, e.name+"_") || slices.Contains(slices.Collect(maps.Values(e.rename)), name) {
			return e
		}
	}
	return nil
}

// owns reports whether name would be an imported tool's.
func (im *imports) owns(name string) bool { return im.owner(name) != nil }
