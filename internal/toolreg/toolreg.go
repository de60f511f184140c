// Package toolreg is the tool registry (docs/tools.md, "The tool
// registry"): the tools a server accepts calls for, each with its kind, its
// argument schema and its execution policy (effect, timeout, retry,
// concurrency). The four built-in tools are always registered; a tools file
// (serve --tools) adds http tools and may tune the built-ins' policy.
//
// The registry checks a call's arguments at accept time (Validate) and runs
// an attempt of any registered tool (Run, a tools.Runner), so neither the
// handlers nor the executor need to know a tool's kind.
package toolreg

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"

	"github.com/idemctl/idemctl/internal/httptool"
	"github.com/idemctl/idemctl/internal/tools"
)

// Tool kinds.
const (
	KindBuiltin = "builtin"
	KindHTTP    = "http"
)

// Defaults of a tool's policy.
const (
	DefaultHTTPTimeout    = 10 * time.Second
	DefaultMaxAttempts    = 1
	DefaultInitialBackoff = 200 * time.Millisecond
	DefaultMaxBackoff     = 30 * time.Second
)

// Limits on a tools file's values.
const (
	// MaxAttemptsLimit caps retry.max_attempts.
	MaxAttemptsLimit = 100
	// MaxTimeout caps timeout and the backoffs: a typo such as 10h must
	// not park a worker (or a call) for the day.
	MaxTimeout = time.Hour
	// MaxDedupWindow caps dedup.window: intent deduplication answers a
	// retry that comes soon after the first try, not a request of
	// another day.
	MaxDedupWindow = 24 * time.Hour
)

// Dedup is a tool's intent-deduplication rule (docs/tools.md, "The tool
// registry"): a call with a new key whose Args equal those of a call of
// the same tool and principal created within Window is answered with
// that call, and the new key becomes an alias of it.
type Dedup struct {
	// Args are the top-level argument names that make up the intent,
	// sorted, without repeats; never empty.
	Args []string
	// Window is how far back a call counts as the same intent: above 0,
	// at most MaxDedupWindow.
	Window time.Duration
}

// namePattern is the shape of a tool name: the one MCP clients accept too.
var namePattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

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
	// Method is an http tool's request method ("" for built-ins).
	Method string
	// Dedup is the tool's intent-deduplication rule; nil: none (only the
	// key deduplicates).
	Dedup *Dedup
	// Principals, if not nil, are the only principals that may call the
	// tool (and see it listed), sorted; nil: every principal.
	Principals []string

	schemaJSON json.RawMessage
	schema     *jsonschema.Schema
	runner     tools.Runner
}

// Schema returns the JSON Schema of the tool's args.
func (t *Tool) Schema() json.RawMessage { return slices.Clone(t.schemaJSON) }

// String names the tool and its kind; an http tool's URL and headers are
// left out.
func (t *Tool) String() string { return t.Name + " (" + t.Kind + ")" }

// GoString is String.
func (t *Tool) GoString() string { return t.String() }

// listing is a tool as GET /v1/tools shows it: no URL, no headers.
type listing struct {
	Name        string          `json:"name"`
	Kind        string          `json:"kind"`
	Description string          `json:"description,omitempty"`
	Schema      json.RawMessage `json:"schema"`
	Effect      bool            `json:"effect"`
	Destructive *bool           `json:"destructive,omitempty"`
	Method      string          `json:"method,omitempty"`
	Timeout     string          `json:"timeout,omitempty"`
	Retry       retryListing    `json:"retry"`
	Concurrency int             `json:"concurrency"`
	Dedup       *dedupListing   `json:"dedup,omitempty"`
}

type dedupListing struct {
	Args   []string `json:"args"`
	Window string   `json:"window"`
}

type retryListing struct {
	MaxAttempts    int    `json:"max_attempts"`
	InitialBackoff string `json:"initial_backoff"`
	MaxBackoff     string `json:"max_backoff"`
}

// MarshalJSON is the tool's public description (docs/api.md, "Tools").
func (t *Tool) MarshalJSON() ([]byte, error) {
	l := listing{Name: t.Name, Kind: t.Kind, Description: t.Description, Schema: t.schemaJSON,
		Effect: t.Effect, Destructive: t.Destructive, Method: t.Method, Concurrency: t.Concurrency,
		Retry: retryListing{MaxAttempts: t.Retry.MaxAttempts,
			InitialBackoff: t.Retry.InitialBackoff.String(), MaxBackoff: t.Retry.MaxBackoff.String()}}
	if t.Timeout > 0 {
		l.Timeout = t.Timeout.String()
	}
	if t.Dedup != nil {
		l.Dedup = &dedupListing{Args: t.Dedup.Args, Window: t.Dedup.Window.String()}
	}
	return json.Marshal(l)
}

// Allows reports whether principal may call the tool (docs/tools.md, "The
// tool registry": principals).
func (t *Tool) Allows(principal string) bool {
	return t.Principals == nil || slices.Contains(t.Principals, principal)
}

// For is the registry as principal sees it: only the tools it may call.
// The registry itself when every tool is open to everyone.
func (r *Registry) For(principal string) *Registry {
	if !slices.ContainsFunc(r.names, func(n string) bool { return r.tools[n].Principals != nil }) {
		return r
	}
	v := &Registry{tools: map[string]*Tool{}}
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
	tools map[string]*Tool
	names []string // sorted
}

// Names returns the registered tool names, sorted.
func (r *Registry) Names() []string { return slices.Clone(r.names) }

// Lookup returns the named tool.
func (r *Registry) Lookup(name string) (*Tool, bool) {
	t, ok := r.tools[name]
	return t, ok
}

// Tools returns the tools sorted by name.
func (r *Registry) Tools() []*Tool {
	out := make([]*Tool, 0, len(r.names))
	for _, n := range r.names {
		out = append(out, r.tools[n])
	}
	return out
}

// String lists the tool names.
func (r *Registry) String() string { return "tools: " + strings.Join(r.names, ", ") }

// GoString is String.
func (r *Registry) GoString() string { return r.String() }

// MarshalJSON is {"tools": [...]}, each as Tool.MarshalJSON.
func (r *Registry) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Tools []*Tool `json:"tools"`
	}{r.Tools()})
}

// Validate checks a call's tool and (normalized) args at accept time. An
// unknown tool wraps tools.ErrUnknownTool; bad args wrap tools.ErrInvalidArgs
// with a message naming the failing place. Built-in tools are checked by
// tools.Validate, exactly as without a registry; other tools by the chaos
// rules of tools.ValidateChaos, then by their schema, the "_" arguments
// left out (they are idemctl's, not the tool's).
func (r *Registry) Validate(tool string, args map[string]any, chaos bool) error {
	t, ok := r.tools[tool]
	if !ok {
		return fmt.Errorf("%w %q (known tools: %s)", tools.ErrUnknownTool, tool, strings.Join(r.names, ", "))
	}
	if t.Kind == KindBuiltin {
		return tools.Validate(tool, args, chaos)
	}
	if err := tools.ValidateChaos(tool, args, chaos); err != nil {
		return err
	}
	clean := make(map[string]any, len(args))
	for k, v := range args {
		if !tools.IsChaosArg(k) {
			clean[k] = v
		}
	}
	err := t.schema.Validate(clean)
	if err == nil {
		return nil
	}
	var verr *jsonschema.ValidationError
	if !errors.As(err, &verr) {
		return fmt.Errorf("%w: %s: %v", tools.ErrInvalidArgs, tool, err)
	}
	path, msg := firstLeaf(verr)
	return fmt.Errorf("%w: %s: at %s: %s", tools.ErrInvalidArgs, tool, path, msg)
}

// firstLeaf picks, of the validator's innermost errors, the one at the
// smallest instance path (then the smallest message), so the same bad args
// are always reported the same way. The path is a JSON Pointer into the
// request body ("/args/amount").
func firstLeaf(e *jsonschema.ValidationError) (path, msg string) {
	type leaf struct{ path, msg string }
	var leaves []leaf
	var walk func(*jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			leaves = append(leaves, leaf{pointer(e.InstanceLocation), e.ErrorKind.LocalizedString(printer)})
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(e)
	best := slices.MinFunc(leaves, func(a, b leaf) int {
		if c := strings.Compare(a.path, b.path); c != 0 {
			return c
		}
		return strings.Compare(a.msg, b.msg)
	})
	return best.path, best.msg
}

// leafMessages returns the smallest instance location among the
// validator's innermost errors (a JSON Pointer, "" for the root) and every
// message at it, sorted: the same bad document is always reported the same
// way.
func leafMessages(e *jsonschema.ValidationError) (path string, msgs []string) {
	type leaf struct{ path, msg string }
	var leaves []leaf
	var walk func(*jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			p := strings.TrimPrefix(pointer(e.InstanceLocation), "/args")
			leaves = append(leaves, leaf{p, e.ErrorKind.LocalizedString(printer)})
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(e)
	path = slices.MinFunc(leaves, func(a, b leaf) int { return strings.Compare(a.path, b.path) }).path
	for _, l := range leaves {
		if l.path == path {
			msgs = append(msgs, l.msg)
		}
	}
	slices.Sort(msgs)
	return path, slices.Compact(msgs)
}

func pointer(loc []string) string {
	var b strings.Builder
	b.WriteString("/args")
	for _, tok := range loc {
		b.WriteByte('/')
		b.WriteString(strings.NewReplacer("~", "~0", "/", "~1").Replace(tok))
	}
	return b.String()
}

// Run runs one attempt of a validated call with the tool's runner: a
// tools.Runner for every kind of tool.
func (r *Registry) Run(ctx context.Context, inv tools.Invocation) (tools.Outcome, error) {
	t, ok := r.tools[inv.Tool]
	if !ok {
		return tools.Outcome{}, fmt.Errorf("%w %q", tools.ErrUnknownTool, inv.Tool)
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
		return tools.Outcome{Err: &tools.ToolError{Code: ErrorCodeToolTimeout,
			Message: fmt.Sprintf("no result within the tool's timeout (%s)", t.Timeout), Retryable: true}}, nil
	}
	return out, err
}

// ErrorCodeToolTimeout is a built-in tool's failure when its timeout (from
// the tools file) ran out before it finished.
const ErrorCodeToolTimeout = "tool_timeout"

var errToolTimeout = errors.New("tool timeout")

var builtins = mustBuiltins()

// Builtins returns the registry of the four built-in tools with their
// default policy: what a server without a tools file runs.
func Builtins() *Registry { return builtins }

func mustBuiltins() *Registry {
	r := &Registry{tools: map[string]*Tool{}}
	for _, name := range tools.Names() {
		t, err := newBuiltin(name)
		if err != nil {
			panic(err) // static data
		}
		r.tools[name] = t
	}
	r.names = slices.Sorted(maps.Keys(r.tools))
	return r
}

func newBuiltin(name string) (*Tool, error) {
	spec := builtinSpecs[name]
	sch, raw, err := compileSchema(name, []byte(spec.schema))
	if err != nil {
		return nil, fmt.Errorf("built-in %s: %w", name, err)
	}
	return &Tool{Name: name, Kind: KindBuiltin, Description: spec.description, Effect: spec.effect,
		Retry:      Retry{MaxAttempts: DefaultMaxAttempts, InitialBackoff: DefaultInitialBackoff, MaxBackoff: DefaultMaxBackoff},
		schemaJSON: raw, schema: sch, runner: tools.Builtin}, nil
}

// compileSchema compiles a JSON Schema document (draft 2020-12 unless it
// says otherwise). It must be self-contained: a $ref to anything outside it
// is refused, so loading a tools file never reads another file or the
// network.
func compileSchema(name string, doc []byte) (*jsonschema.Schema, json.RawMessage, error) {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return nil, nil, fmt.Errorf("not JSON: %v", err)
	}
	switch v.(type) {
	case map[string]any, bool:
	default:
		return nil, nil, errors.New("must be an object (or a boolean)")
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(noLoader{})
	loc := "file:///idemctl/tools/" + name + ".schema.json"
	if err := c.AddResource(loc, v); err != nil {
		return nil, nil, err
	}
	sch, err := c.Compile(loc)
	if err != nil {
		// The metaschema's verdict is a tree of causes; one line naming
		// the place in the schema reads better in a start-up error.
		// (SchemaValidationError has no Unwrap: its Err is read by hand.)
		var serr *jsonschema.SchemaValidationError
		var verr *jsonschema.ValidationError
		if errors.As(err, &serr) && errors.As(serr.Err, &verr) {
			path, msgs := leafMessages(verr)
			if path == "" {
				path = "/"
			}
			return nil, nil, fmt.Errorf("not a valid JSON Schema: at %s: %s", path, strings.Join(msgs, "; "))
		}
		return nil, nil, errors.New(strings.ReplaceAll(err.Error(), loc, "schema"))
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, doc); err != nil {
		return nil, nil, err
	}
	return sch, buf.Bytes(), nil
}

type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("%s: schemas must be self-contained ($ref to other documents is not supported)", url)
}

// Load reads a tools file (YAML or JSON) and returns the registry: the
// built-ins plus the file's tools. getenv expands ${VAR} in header values
// (nil: os.LookupEnv). Errors name the file, the tool and the field.
func Load(path string, getenv func(string) (string, bool)) (*Registry, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	r, err := Parse(data, getenv)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

// Parse is Load on the file's contents.
func Parse(data []byte, getenv func(string) (string, bool)) (*Registry, error) {
	if getenv == nil {
		getenv = os.LookupEnv
	}
	var doc any
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("not valid YAML or JSON: %v", err)
	}
	top, ok := doc.(map[string]any)
	if !ok {
		return nil, errors.New(`the file must be a mapping with a "tools" list`)
	}
	for k := range top {
		if k != "tools" {
			return nil, fmt.Errorf("unknown key %q (the file has one key, tools)", k)
		}
	}
	list, ok := top["tools"].([]any)
	if !ok {
		return nil, errors.New(`tools: must be a list`)
	}
	r := &Registry{tools: maps.Clone(builtins.tools)}
	declared := map[string]bool{}
	var errs []error
	for i, raw := range list {
		t, err := parseTool(i, raw, getenv)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if declared[t.Name] {
			errs = append(errs, fmt.Errorf("tools[%d] (%s): name: declared twice", i, t.Name))
			continue
		}
		declared[t.Name] = true
		r.tools[t.Name] = t
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	r.names = slices.Sorted(maps.Keys(r.tools))
	return r, nil
}

// fields lists the keys a tool entry may have, by kind.
var fields = map[string][]string{
	KindBuiltin: {"name", "kind", "description", "destructive", "timeout", "retry", "concurrency", "dedup", "principals"},
	KindHTTP: {"name", "kind", "description", "destructive", "timeout", "retry", "concurrency", "dedup", "principals",
		"schema", "effect", "url", "method", "headers"},
}

func parseTool(i int, raw any, getenv func(string) (string, bool)) (*Tool, error) {
	where := fmt.Sprintf("tools[%d]", i)
	m, ok := raw.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s: must be a mapping", where)
	}
	name, ok := m["name"].(string)
	if !ok {
		return nil, fmt.Errorf("%s: name: required, a string", where)
	}
	if !namePattern.MatchString(name) {
		return nil, fmt.Errorf("%s: name: %q must be 1 to 64 letters, digits, '_' or '-'", where, name)
	}
	where += " (" + name + ")"
	bad := func(field, format string, a ...any) error {
		return fmt.Errorf("%s: %s: %s", where, field, fmt.Sprintf(format, a...))
	}
	kind, ok := m["kind"].(string)
	if !ok || fields[kind] == nil {
		return nil, bad("kind", "required, one of %s, %s; got %s", KindHTTP, KindBuiltin, show(m["kind"]))
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if !slices.Contains(fields[kind], k) {
			if kind == KindBuiltin && slices.Contains(fields[KindHTTP], k) {
				return nil, bad(k, "not allowed for a builtin tool (only %s)", strings.Join(fields[KindBuiltin][2:], ", "))
			}
			return nil, bad(k, "unknown field (allowed: %s)", strings.Join(fields[kind], ", "))
		}
	}

	var t *Tool
	if kind == KindBuiltin {
		if !tools.Known(name) {
			return nil, bad("name", "%q is not a built-in tool (built-ins: %s)", name, strings.Join(tools.Names(), ", "))
		}
		b, err := newBuiltin(name)
		if err != nil {
			return nil, err
		}
		t = b
	} else {
		if tools.Known(name) {
			return nil, bad("name", "%q is a built-in tool; declare it with kind: builtin", name)
		}
		t = &Tool{Name: name, Kind: KindHTTP, Effect: true, Timeout: DefaultHTTPTimeout,
			Retry: Retry{MaxAttempts: DefaultMaxAttempts, InitialBackoff: DefaultInitialBackoff, MaxBackoff: DefaultMaxBackoff}}
	}

	if v, ok := m["description"]; ok {
		s, isStr := v.(string)
		if !isStr {
			return nil, bad("description", "must be a string, got %s", show(v))
		}
		t.Description = s
	}
	if v, ok := m["destructive"]; ok {
		b, isBool := v.(bool)
		if !isBool {
			return nil, bad("destructive", "must be true or false, got %s", show(v))
		}
		t.Destructive = &b
	}
	if v, ok := m["effect"]; ok {
		b, isBool := v.(bool)
		if !isBool {
			return nil, bad("effect", "must be true or false, got %s", show(v))
		}
		t.Effect = b
	}
	if v, ok := m["timeout"]; ok {
		d, err := duration(v)
		if err != nil {
			return nil, bad("timeout", "%v", err)
		}
		t.Timeout = d
	}
	if v, ok := m["concurrency"]; ok {
		n, isInt := v.(int)
		if !isInt || n < 0 {
			return nil, bad("concurrency", "must be an integer >= 0 (0: no limit of its own), got %s", show(v))
		}
		t.Concurrency = n
	}
	if v, ok := m["retry"]; ok {
		if err := parseRetry(v, &t.Retry); err != nil {
			return nil, fmt.Errorf("%s: retry.%w", where, err)
		}
	}
	if v, ok := m["principals"]; ok {
		p, err := parsePrincipals(v)
		if err != nil {
			return nil, bad("principals", "%v", err)
		}
		t.Principals = p
	}
	if kind == KindBuiltin {
		if err := setDedup(m, t, where); err != nil {
			return nil, err
		}
		return t, nil
	}

	schema := []byte(`{"type": "object"}`)
	if v, ok := m["schema"]; ok {
		b, err := json.Marshal(v)
		if err != nil {
			return nil, bad("schema", "cannot be expressed as JSON: %v", err)
		}
		schema = b
	}
	sch, schemaJSON, err := compileSchema(name, schema)
	if err != nil {
		return nil, bad("schema", "%v", err)
	}
	t.schema, t.schemaJSON = sch, schemaJSON
	if err := setDedup(m, t, where); err != nil {
		return nil, err
	}

	// A Retry-After longer than the tool's longest backoff is not
	// honoured in full (docs/tools.md, "The http kind").
	cfg := httptool.Config{Name: name, Timeout: t.Timeout, Effect: t.Effect, MaxRetryAfter: t.Retry.MaxBackoff}
	if v, ok := m["url"]; ok {
		if cfg.URL, ok = v.(string); !ok {
			return nil, bad("url", "must be a string, got %s", show(v))
		}
	} else {
		return nil, bad("url", "required for an http tool")
	}
	if v, ok := m["method"]; ok {
		if cfg.Method, ok = v.(string); !ok {
			return nil, bad("method", "must be a string, got %s", show(v))
		}
	}
	if v, ok := m["headers"]; ok {
		hm, isMap := v.(map[string]any)
		if !isMap {
			return nil, bad("headers", "must be a mapping of header name to value")
		}
		for _, hn := range slices.Sorted(maps.Keys(hm)) {
			s, isStr := hm[hn].(string)
			if !isStr {
				// The value's type only: a value may be a secret.
				return nil, bad("headers."+hn, "must be a string, got a %T", hm[hn])
			}
			val, vars, err := expand(s, getenv)
			if err != nil {
				return nil, bad("headers."+hn, "%v", err)
			}
			cfg.Headers = append(cfg.Headers, httptool.Header{Name: hn, Value: httptool.NewSecret(val)})
			// What came from the environment is a secret, alone and in
			// the header it makes up: a downstream's echo of either is
			// redacted. A value written in the file is configuration.
			if len(vars) > 0 {
				cfg.Redact = append(cfg.Redact, httptool.NewSecret(val))
				for _, v := range vars {
					cfg.Redact = append(cfg.Redact, httptool.NewSecret(v))
				}
			}
		}
	}
	ht, err := httptool.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	t.Method = cfg.Method
	if t.Method == "" {
		t.Method = "POST"
	}
	t.runner = ht
	return t, nil
}

// setDedup reads the entry's dedup field, if any, into t. It runs once
// t's schema is known: the args must be the schema's top-level properties.
func setDedup(m map[string]any, t *Tool, where string) error {
	v, ok := m["dedup"]
	if !ok {
		return nil
	}
	d, err := parseDedup(v, t.schemaJSON)
	if err != nil {
		return fmt.Errorf("%s: dedup%w", where, err)
	}
	t.Dedup = d
	return nil
}

func parseDedup(v any, schemaJSON json.RawMessage) (*Dedup, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, errors.New(": must be a mapping with args and window")
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if k != "args" && k != "window" {
			return nil, fmt.Errorf(".%s: unknown field (allowed: args, window)", k)
		}
	}
	list, ok := m["args"].([]any)
	if !ok || len(list) == 0 {
		return nil, fmt.Errorf(".args: required, a non-empty list of argument names, got %s", show(m["args"]))
	}
	props := topProperties(schemaJSON)
	d := &Dedup{}
	for _, a := range list {
		s, isStr := a.(string)
		if !isStr {
			return nil, fmt.Errorf(".args: %s is not an argument name", show(a))
		}
		if !slices.Contains(props, s) {
			return nil, fmt.Errorf(".args: %q is not a top-level property of the tool's schema (properties: %s)",
				s, strings.Join(props, ", "))
		}
		d.Args = append(d.Args, s)
	}
	slices.Sort(d.Args)
	d.Args = slices.Compact(d.Args)
	w, ok := m["window"]
	if !ok {
		return nil, errors.New(`.window: required, a duration such as "10m"`)
	}
	s, isStr := w.(string)
	if !isStr {
		return nil, fmt.Errorf(".window: %s is not a duration (write it with a unit, e.g. \"10m\")", show(w))
	}
	dur, err := time.ParseDuration(s)
	if err != nil {
		return nil, fmt.Errorf(".window: %q is not a duration", s)
	}
	if dur <= 0 || dur > MaxDedupWindow {
		return nil, fmt.Errorf(".window: %q must be above 0 and at most %s", s, MaxDedupWindow)
	}
	d.Window = dur
	return d, nil
}

// topProperties lists, sorted, the names under the schema's top-level
// "properties" (none for a schema that declares none).
func topProperties(schemaJSON json.RawMessage) []string {
	var doc struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if json.Unmarshal(schemaJSON, &doc) != nil {
		return nil
	}
	return slices.Sorted(maps.Keys(doc.Properties))
}

func parseRetry(v any, r *Retry) error {
	m, ok := v.(map[string]any)
	if !ok {
		return fmt.Errorf(": must be a mapping with max_attempts, initial_backoff, max_backoff")
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		switch k {
		case "max_attempts":
			n, isInt := m[k].(int)
			if !isInt || n < 1 || n > MaxAttemptsLimit {
				return fmt.Errorf("max_attempts: must be an integer from 1 to %d, got %s", MaxAttemptsLimit, show(m[k]))
			}
			r.MaxAttempts = n
		case "initial_backoff", "max_backoff":
			d, err := duration(m[k])
			if err != nil {
				return fmt.Errorf("%s: %v", k, err)
			}
			if k == "initial_backoff" {
				r.InitialBackoff = d
			} else {
				r.MaxBackoff = d
			}
		default:
			return fmt.Errorf("%s: unknown field (allowed: max_attempts, initial_backoff, max_backoff)", k)
		}
	}
	if r.MaxBackoff < r.InitialBackoff {
		return fmt.Errorf("max_backoff: %s is shorter than initial_backoff %s", r.MaxBackoff, r.InitialBackoff)
	}
	return nil
}

// duration reads a positive Go duration string ("10s", "200ms") up to
// MaxTimeout.
func duration(v any) (time.Duration, error) {
	s, ok := v.(string)
	if !ok {
		return 0, fmt.Errorf("%s is not a duration (write it with a unit, e.g. \"10s\")", show(v))
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration", s)
	}
	if d <= 0 || d > MaxTimeout {
		return 0, fmt.Errorf("%q must be above 0 and at most %s", s, MaxTimeout)
	}
	return d, nil
}

var varRef = regexp.MustCompile(`\$\{([^}]*)\}`)
var varName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// expand replaces each ${VAR} in s by the variable's value, and returns
// the values used. An unset or empty variable is an error (a header
// "Bearer " would fail every call quietly); the error names the variable,
// never a value.
func expand(s string, getenv func(string) (string, bool)) (string, []string, error) {
	var err error
	var vals []string
	out := varRef.ReplaceAllStringFunc(s, func(ref string) string {
		name := ref[2 : len(ref)-1]
		if !varName.MatchString(name) {
			err = errors.Join(err, fmt.Errorf("${%s}: not a variable name", name))
			return ""
		}
		v, ok := getenv(name)
		if !ok || v == "" {
			err = errors.Join(err, fmt.Errorf("environment variable %s is not set (or empty)", name))
		}
		vals = append(vals, v)
		return v
	})
	if err != nil {
		return "", nil, err
	}
	return out, vals, nil
}

// parsePrincipals reads a tool's principals: a non-empty list of names.
// Whether each is a valid principal name, and whether the server has
// tokens at all, the server checks (server.CheckToolAccess), where the
// principals' rules live.
func parsePrincipals(v any) ([]string, error) {
	list, ok := v.([]any)
	if !ok || len(list) == 0 {
		return nil, fmt.Errorf("must be a non-empty list of principal names (leave the field out to let every principal call the tool), got %s", show(v))
	}
	var out []string
	for _, e := range list {
		s, isStr := e.(string)
		if !isStr || s == "" {
			return nil, fmt.Errorf("%s is not a principal name", show(e))
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// show renders a configuration value for an error message.
func show(v any) string {
	switch x := v.(type) {
	case nil:
		return "nothing"
	case string:
		return strconv.Quote(x)
	case map[string]any:
		return "a mapping"
	case []any:
		return "a list"
	}
	return fmt.Sprint(v)
}
