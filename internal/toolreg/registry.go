// Package toolreg is the tool registry (docs/tools.md, "The tool
// registry"): the tools a server accepts calls for, each with its kind, its
// argument schema and its execution policy (effect, timeout, retry,
// concurrency). The four built-in tools are always registered; a tools file
// (serve --tools) adds http tools and may tune the built-ins' policy.
//
// The registry checks a call's arguments at accept time (Validate) and runs
// an attempt of any registered tool (Run, a tool.Runner), so neither the
// handlers nor the executor need to know a tool's kind.
package toolreg

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/idemctl/idemctl/internal/httptool"
	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/tool"
	"github.com/idemctl/idemctl/internal/wire"
)

// Tool kinds.
const (
	KindBuiltin = "builtin"
	KindHTTP    = "http"
	KindMCP     = "mcp"
)

// Defaults of a tool's policy.
const (
	defaultHTTPTimeout    = 10 * time.Second
	defaultMCPTimeout     = 30 * time.Second
	defaultMaxAttempts    = 1
	defaultInitialBackoff = 200 * time.Millisecond
	defaultMaxBackoff     = 30 * time.Second
)

// The on_unknown policies (docs/tools.md, "Unknown outcomes"): what the
// executor does before a new attempt of a call whose previous attempt's
// outcome is unknown.
const (
	// OnUnknownRetry runs the attempt, with the same key: safe against a
	// downstream that honours keys. The default.
	OnUnknownRetry = "retry"
	// OnUnknownLookup asks the downstream first (the tool's lookup).
	OnUnknownLookup = "lookup"
	// OnUnknownHold fails the call for an operator to settle
	// (idemctl resolve).
	OnUnknownHold = "hold"
)

// OnUnknownPolicies lists the policies, the default first.
var OnUnknownPolicies = []string{OnUnknownRetry, OnUnknownLookup, OnUnknownHold}

// Dedup is a tool's intent-deduplication rule (docs/tools.md, "The tool
// registry"): a call with a new key whose Args equal those of a call of
// the same tool and principal created within Window is answered with
// that call, and the new key becomes an alias of it.
type Dedup struct {
	// Args are the top-level argument names that make up the intent,
	// sorted, without repeats; never empty.
	Args []string
	// Window is how far back a call counts as the same intent: above 0,
	// at most maxDedupWindow.
	Window time.Duration
}

// namePattern is the shape of a tool name: the one MCP clients accept too.
// Retry is a tool's policy for server-side retries of retryable failures.
type Retry struct {
	// MaxAttempts counts every attempt, the first included; 1 means no
	// server-side retry.
	MaxAttempts int
	// InitialBackoff is the delay before the second attempt; each later
	// delay doubles, with jitter, up to MaxBackoff.
	InitialBackoff time.Duration
	MaxBackoff     time.Duration
}

// Tool is one registered tool. Its fields are read-only once loaded.
type Tool struct {
	Name        string
	Kind        string
	Description string
	// Effect: a success records an effect row.
	Effect bool
	// Destructive is an optional hint for clients (nil: not said).
	Destructive *bool
	// Timeout bounds one attempt; 0 means the tool's own bound (built-ins).
	Timeout time.Duration
	Retry   Retry
	// Concurrency caps the tool's executions at once; 0 means only the
	// server's worker count does.
	Concurrency int
	// Rate is the tool's rate limit and Breaker its circuit breaker
	// (docs/tools.md, "Rate limits", "Circuit breakers"); nil: none.
	Rate    *store.Rate
	Breaker *store.Breaker
	// Method is an http tool's request method ("" for built-ins).
	Method string
	// Dedup is the tool's intent-deduplication rule; nil: none (only the
	// key deduplicates).
	Dedup *Dedup
	// OnUnknown is the tool's on_unknown policy (OnUnknownPolicies); ""
	// for a built-in, which behaves as OnUnknownRetry.
	OnUnknown string
	// Principals, if not nil, are the only principals that may call the
	// tool (and see it listed), sorted; nil: every principal.
	Principals []string
	// Reconcile is an http tool's list of downstream records; nil: the
	// tool cannot be reconciled.
	Reconcile *Reconcile

	// Upstream is an mcp tool's entry in the tools file ("" otherwise);
	// Annotations its annotations as the upstream lists them.
	Upstream    string
	Annotations json.RawMessage

	schemaJSON json.RawMessage
	schema     *jsonschema.Schema
	runner     tool.Runner
	// effectSet: the file said effect, which wins over an mcp tool's
	// readOnlyHint.
	effectSet bool
	// upstream is set on an mcp entry's template, never on a registered
	// tool.
	upstream *upstreamEntry
}

// Schema returns the JSON Schema of the tool's args.
func (t *Tool) Schema() json.RawMessage { return slices.Clone(t.schemaJSON) }

// String names the tool and its kind; an http tool's URL and headers are
// left out.
func (t *Tool) String() string { return t.Name + " (" + t.Kind + ")" }

// GoString is String.
func (t *Tool) GoString() string { return t.String() }

// MarshalJSON is the tool's public description (docs/api.md, "Tools").
func (t *Tool) MarshalJSON() ([]byte, error) { return json.Marshal(t.listing()) }

// listing is the tool as GET /v1/tools lists it: no URL, no headers.
func (t *Tool) listing() wire.Tool {
	l := wire.Tool{Name: t.Name, Kind: t.Kind, Description: t.Description, Schema: t.schemaJSON,
		Upstream: t.Upstream, Annotations: t.Annotations, OnUnknown: t.OnUnknown,
		Effect: t.Effect, Destructive: t.Destructive, Method: t.Method, Concurrency: t.Concurrency,
		Retry: wire.ToolRetry{MaxAttempts: t.Retry.MaxAttempts,
			InitialBackoff: t.Retry.InitialBackoff.String(), MaxBackoff: t.Retry.MaxBackoff.String()}}
	if t.Timeout > 0 {
		l.Timeout = t.Timeout.String()
	}
	if t.Dedup != nil {
		l.Dedup = &wire.ToolDedup{Args: t.Dedup.Args, Window: t.Dedup.Window.String()}
	}
	if r := t.Rate; r != nil {
		l.Rate = &wire.ToolRate{Limit: r.Limit, Per: r.Per.String(), Burst: r.Burst}
	}
	if b := t.Breaker; b != nil {
		// The state is the server's to add (it reads the store); a
		// listing without one shows a breaker never opened.
		l.Breaker = &wire.ToolBreaker{Failures: b.Failures, Cooldown: b.Cooldown.String(), FailFast: b.FailFast,
			State: wire.BreakerClosed}
	}
	return l
}

// Allows reports whether principal may call the tool (docs/tools.md, "The
// tool registry": principals).
func (t *Tool) Allows(principal string) bool {
	return t.Principals == nil || slices.Contains(t.Principals, principal)
}

// For is the registry as principal sees it: only the tools it may call.
// The registry itself when every tool is open to everyone.
func (r *Registry) For(principal string) *Registry {
	if r.up == nil && !slices.ContainsFunc(r.names, func(n string) bool { return r.tools[n].Principals != nil }) {
		return r
	}
	v := &Registry{tools: map[string]*Tool{}, up: r.up, viewer: &principal}
	for _, n := range r.names {
		if t := r.tools[n]; t.Allows(principal) {
			v.tools[n] = t
			v.names = append(v.names, n)
		}
	}
	return v
}

// Registry is a set of tools by name. A nil *Registry is not valid; use
// Builtins for the default.
type Registry struct {
	tools map[string]*Tool // the built-ins and the file's http tools
	names []string         // sorted
	// up are the file's mcp entries and the tools imported from them
	// (Refresh), shared by every view of the registry; nil: none.
	up *imports
	// viewer, in a view made by For, is the principal whose imported
	// tools it shows.
	viewer *string
}

// Names returns the registered tool names, sorted.
func (r *Registry) Names() []string {
	out := make([]string, 0, len(r.names))
	for _, t := range r.Tools() {
		out = append(out, t.Name)
	}
	return out
}

// Lookup returns the named tool.
func (r *Registry) Lookup(name string) (*Tool, bool) {
	if t, ok := r.tools[name]; ok {
		return t, ok
	}
	if r.up == nil {
		return nil, false
	}
	t, ok := r.up.current().tools[name]
	if !ok || (r.viewer != nil && !t.Allows(*r.viewer)) {
		return nil, false
	}
	return t, true
}

// Tools returns the tools sorted by name.
func (r *Registry) Tools() []*Tool {
	out := make([]*Tool, 0, len(r.names))
	for _, n := range r.names {
		out = append(out, r.tools[n])
	}
	if r.up == nil {
		return out
	}
	for _, t := range r.up.current().list {
		if r.viewer == nil || t.Allows(*r.viewer) {
			out = append(out, t)
		}
	}
	slices.SortFunc(out, func(a, b *Tool) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// String lists the tool names.
func (r *Registry) String() string { return "tools: " + strings.Join(r.Names(), ", ") }

// GoString is String.
func (r *Registry) GoString() string { return r.String() }

// MarshalJSON is the body of GET /v1/tools (wire.Tools).
func (r *Registry) MarshalJSON() ([]byte, error) { return json.Marshal(r.Listing()) }

// Listing is the body of GET /v1/tools; each breaker is listed closed
// (its state is the store's, which the server adds).
func (r *Registry) Listing() wire.Tools {
	tools := r.Tools()
	body := wire.Tools{Tools: make([]wire.Tool, 0, len(tools))}
	for _, t := range tools {
		body.Tools = append(body.Tools, t.listing())
	}
	return body
}

// Run runs one attempt of a validated call with the tool's runner: a
// tool.Runner for every kind of tool.
func (r *Registry) Run(ctx context.Context, inv tool.Invocation) (tool.Outcome, error) {
	t, ok := r.Lookup(inv.Tool)
	if !ok && r.up.owns(inv.Tool) {
		// Accepted when (or where) the upstream listed it: ask the
		// upstream again before judging it gone.
		r.refreshForMiss(ctx)
		t, ok = r.Lookup(inv.Tool)
	}
	if !ok {
		if out, isImport := r.up.missing(inv.Tool); isImport {
			return out, nil
		}
		return tool.Outcome{}, fmt.Errorf("%w %q", tool.ErrUnknownTool, inv.Tool)
	}
	if t.Kind != KindBuiltin || t.Timeout <= 0 {
		// An http tool bounds its own attempt (downstream_timeout).
		return t.runner.Run(ctx, inv)
	}
	tctx, cancel := context.WithTimeoutCause(ctx, t.Timeout, errToolTimeout)
	defer cancel()
	out, err := t.runner.Run(tctx, inv)
	if err != nil && ctx.Err() == nil && errors.Is(context.Cause(tctx), errToolTimeout) {
		// Our bound, not the caller's cancel (shutdown, lost lease,
		// cancel request): an outcome to record, retryable like a
		// downstream timeout.
		return tool.Outcome{Err: &tool.ToolError{Code: errorCodeToolTimeout,
			Message: fmt.Sprintf("no result within the tool's timeout (%s)", t.Timeout), Retryable: true}}, nil
	}
	return out, err
}

// errorCodeToolTimeout is a built-in tool's failure when its timeout (from
// the tools file) ran out before it finished.
const errorCodeToolTimeout = wire.CodeToolTimeout

var errToolTimeout = errors.New("tool timeout")

// LookupEffect asks the downstream of inv's tool whether the call's
// effect happened (docs/tools.md, "Unknown outcomes"), with the tool's
// lookup. An error for a tool that has none (only an http tool may), or
// when ctx ended first.
func (r *Registry) LookupEffect(ctx context.Context, inv tool.Invocation) (tool.LookupAnswer, error) {
	t, ok := r.Lookup(inv.Tool)
	if !ok {
		return tool.LookupAnswer{}, fmt.Errorf("%w %q", tool.ErrUnknownTool, inv.Tool)
	}
	ht, isHTTP := t.runner.(*httptool.Tool)
	if !isHTTP || !ht.HasLookup() {
		return tool.LookupAnswer{}, fmt.Errorf("toolreg: tool %q has no lookup", inv.Tool)
	}
	return ht.Lookup(ctx, inv)
}
