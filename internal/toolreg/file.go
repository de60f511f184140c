package toolreg

import (
	"bytes"
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

	"go.yaml.in/yaml/v3"

	"github.com/idemctl/idemctl/internal/httptool"
	"github.com/idemctl/idemctl/internal/tool/builtin"
)

// Limits on a tools file's values.
const (
	// maxAttemptsLimit caps retry.max_attempts.
	maxAttemptsLimit = 100
	// maxTimeout caps timeout and the backoffs: a typo such as 10h must
	// not park a worker (or a call) for the day.
	maxTimeout = time.Hour
	// maxDedupWindow caps dedup.window: intent deduplication answers a
	// retry that comes soon after the first try, not a request of
	// another day.
	maxDedupWindow = 24 * time.Hour
)

// namePattern is the shape of a tool name: the one MCP clients accept too.
var namePattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// toolsFile is the tools file (docs/tools.md, "The tool registry").
type toolsFile struct {
	Tools entryList `yaml:"tools"`
}

// entryList is the tools list. It keeps every item, null ones included,
// so that each refusal names the item's own index.
type entryList []toolEntry

// UnmarshalYAML decodes the items one by one: yaml.v3 drops a null item
// of a typed list, which would both hide it and shift the indexes after
// it.
func (l *entryList) UnmarshalYAML(n *yaml.Node) error {
	for n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	for _, item := range n.Content {
		var e toolEntry // a null item stays zero: not a mapping
		if err := item.Decode(&e); err != nil {
			return err
		}
		*l = append(*l, e)
	}
	return nil
}

// toolEntry is one entry of the file's tools list. The fields tagged
// kind:"http" are an http tool's only; a builtin entry tunes the policy of
// a built-in tool and has the others.
type toolEntry struct {
	Name        opt[string]  `yaml:"name"`
	Kind        opt[string]  `yaml:"kind"`
	Description opt[string]  `yaml:"description" kind:"builtin,http"`
	Destructive opt[bool]    `yaml:"destructive" kind:"builtin,http"`
	Timeout     opt[string]  `yaml:"timeout"`
	Retry       retryEntry   `yaml:"retry"`
	Concurrency opt[int]     `yaml:"concurrency"`
	Rate        rateEntry    `yaml:"rate"`
	Breaker     breakerEntry `yaml:"breaker"`
	Dedup       dedupEntry   `yaml:"dedup" kind:"builtin,http"`
	// Principals are read as any: a refusal shows what was written.
	Principals opt[any] `yaml:"principals"`

	// Schema is the JSON Schema of the args, written in YAML or JSON.
	Schema opt[any]    `yaml:"schema" kind:"http"`
	Effect opt[bool]   `yaml:"effect" kind:"http,mcp"`
	URL    opt[string] `yaml:"url" kind:"http,mcp"`
	Method opt[string] `yaml:"method" kind:"http"`
	// Headers' values are strings with ${VAR} references, checked one by
	// one so that a refusal names the header and never shows a value.
	Headers opt[map[string]any] `yaml:"headers" kind:"http,mcp"`
	// Reconcile describes the downstream's list of records (reconcile.go).
	Reconcile reconcileEntry `yaml:"reconcile" kind:"http"`

	// What to do before a new attempt of a call whose previous attempt's
	// outcome is unknown (docs/tools.md, "Unknown outcomes"), and how to
	// ask the downstream for on_unknown: lookup.
	OnUnknown opt[string] `yaml:"on_unknown" kind:"http,mcp"`
	Lookup    lookupEntry `yaml:"lookup" kind:"http"`

	// An mcp entry's own fields (docs/tools.md, "The mcp kind").
	Command opt[[]any]          `yaml:"command" kind:"mcp"`
	Env     opt[map[string]any] `yaml:"env" kind:"mcp"`
	Tools   opt[[]any]          `yaml:"tools" kind:"mcp"`
	Rename  opt[map[string]any] `yaml:"rename" kind:"mcp"`

	shape mapping
}

// UnmarshalYAML decodes the entry without ever failing on a wrong value
// (decode.go says why).
func (e *toolEntry) UnmarshalYAML(n *yaml.Node) error {
	type fields toolEntry // without this method, so Decode does not recurse
	return e.shape.decode(n, (*fields)(e))
}

// retryEntry is a tool's retry field.
type retryEntry struct {
	MaxAttempts    opt[int]    `yaml:"max_attempts"`
	InitialBackoff opt[string] `yaml:"initial_backoff"`
	MaxBackoff     opt[string] `yaml:"max_backoff"`

	shape mapping
}

// UnmarshalYAML is as toolEntry's.
func (r *retryEntry) UnmarshalYAML(n *yaml.Node) error {
	type fields retryEntry
	return r.shape.decode(n, (*fields)(r))
}

func (r *retryEntry) markSet() { r.shape.markSet() }

// dedupEntry is a tool's dedup field.
type dedupEntry struct {
	Args   opt[[]any]  `yaml:"args"`
	Window opt[string] `yaml:"window"`

	shape mapping
}

// UnmarshalYAML is as toolEntry's.
func (d *dedupEntry) UnmarshalYAML(n *yaml.Node) error {
	type fields dedupEntry
	return d.shape.decode(n, (*fields)(d))
}

func (d *dedupEntry) markSet() { d.shape.markSet() }

// lookupEntry is an http tool's lookup field.
type lookupEntry struct {
	URL      opt[string] `yaml:"url"`
	Method   opt[string] `yaml:"method"`
	Found    opt[[]any]  `yaml:"found"`
	NotFound opt[[]any]  `yaml:"not_found"`

	shape mapping
}

// UnmarshalYAML is as toolEntry's.
func (l *lookupEntry) UnmarshalYAML(n *yaml.Node) error {
	type fields lookupEntry
	return l.shape.decode(n, (*fields)(l))
}

func (l *lookupEntry) markSet() { l.shape.markSet() }

// The keys each shape may have, from the shapes' tags.
var (
	httpFields    = fieldNames(toolEntry{}, KindHTTP)
	builtinFields = fieldNames(toolEntry{}, KindBuiltin)
	mcpFields     = fieldNames(toolEntry{}, KindMCP)
	retryFields   = fieldNames(retryEntry{}, "")
	dedupFields   = fieldNames(dedupEntry{}, "")
	lookupFields  = fieldNames(lookupEntry{}, "")
	rateFields    = fieldNames(rateEntry{}, "")
	breakerFields = fieldNames(breakerEntry{}, "")
	fileFields    = fieldNames(toolsFile{}, "")
)

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

// Parse is Load on the file's contents. Every bad entry is reported, each
// by its first bad field.
func Parse(data []byte, getenv func(string) (string, bool)) (*Registry, error) {
	if getenv == nil {
		getenv = os.LookupEnv
	}
	// The document is decoded generically first: what YAML itself
	// refuses (syntax, a repeated key, an alias that contains itself) is
	// refused here, once, for the whole file.
	var root yaml.Node
	var doc any
	dec := yaml.NewDecoder(bytes.NewReader(data))
	err := dec.Decode(&root)
	if err == nil {
		err = root.Decode(&doc)
	}
	if err != nil {
		return nil, fmt.Errorf("not valid YAML or JSON: %v", err)
	}
	top, ok := doc.(map[string]any)
	if !ok {
		return nil, errors.New(`the file must be a mapping with a "tools" list`)
	}
	for _, k := range slices.Sorted(maps.Keys(top)) {
		if !slices.Contains(fileFields, k) {
			return nil, fmt.Errorf("unknown key %q (the file has one key, tools)", k)
		}
	}
	if _, ok := top["tools"].([]any); !ok {
		return nil, errors.New(`tools: must be a list`)
	}
	var file toolsFile
	if err := root.Decode(&file); err != nil {
		return nil, fmt.Errorf("not valid YAML or JSON: %v", err)
	}

	r := &Registry{tools: maps.Clone(builtins.tools)}
	declared := map[string]bool{}
	var errs []error
	for i, e := range file.Tools {
		t, err := parseTool(i, e, getenv)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if declared[t.Name] {
			errs = append(errs, fmt.Errorf("tools[%d] (%s): name: declared twice", i, t.Name))
			continue
		}
		declared[t.Name] = true
		if t.upstream != nil {
			// Its tools are imported by Refresh, from the upstream.
			if r.up == nil {
				r.up = &imports{}
			}
			r.up.entries = append(r.up.entries, t.upstream)
			continue
		}
		r.tools[t.Name] = t
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	r.names = slices.Sorted(maps.Keys(r.tools))
	return r, nil
}

// parseTool checks entry i of the file and builds its tool. The checks run
// in this order, so that an entry with several faults is always refused
// for the same one: name, kind, unknown fields, the name against the
// built-ins, then the fields one by one.
func parseTool(i int, e toolEntry, getenv func(string) (string, bool)) (*Tool, error) {
	where := fmt.Sprintf("tools[%d]", i)
	if !e.shape.ok {
		// A null entry is never decoded at all: shape.ok stays false.
		return nil, fmt.Errorf("%s: must be a mapping", where)
	}
	if !e.Name.ok {
		return nil, fmt.Errorf("%s: name: required, a string", where)
	}
	name := e.Name.val
	if !namePattern.MatchString(name) {
		return nil, fmt.Errorf("%s: name: %q must be 1 to 64 letters, digits, '_' or '-'", where, name)
	}
	where += " (" + name + ")"
	bad := func(field, format string, a ...any) error {
		return fmt.Errorf("%s: %s: %s", where, field, fmt.Sprintf(format, a...))
	}
	kind := e.Kind.val
	if !e.Kind.ok || (kind != KindBuiltin && kind != KindHTTP && kind != KindMCP) {
		return nil, bad("kind", "required, one of %s, %s, %s; got %s", KindHTTP, KindMCP, KindBuiltin, show(e.Kind.raw))
	}
	allowed := httpFields
	switch kind {
	case KindBuiltin:
		allowed = builtinFields
	case KindMCP:
		allowed = mcpFields
	}
	if k, found := e.shape.unknown(allowed); found {
		if kind == KindMCP && k == "lookup" {
			return nil, bad(k, "%s", errMCPLookup)
		}
		if kind == KindBuiltin && slices.Contains(httpFields, k) {
			return nil, bad(k, "not allowed for a builtin tool (only %s)", strings.Join(builtinFields[2:], ", "))
		}
		return nil, bad(k, "unknown field (allowed: %s)", strings.Join(allowed, ", "))
	}

	var t *Tool
	if kind == KindBuiltin {
		if !builtin.Known(name) {
			return nil, bad("name", "%q is not a built-in tool (built-ins: %s)", name, strings.Join(builtin.Names(), ", "))
		}
		b, err := newBuiltin(name)
		if err != nil {
			return nil, err
		}
		t = b
	} else if kind == KindMCP {
		if builtin.Known(name) {
			return nil, bad("name", "%q is a built-in tool's name", name)
		}
		t = &Tool{Name: name, Kind: KindMCP, Timeout: defaultMCPTimeout,
			Retry: Retry{MaxAttempts: defaultMaxAttempts, InitialBackoff: defaultInitialBackoff, MaxBackoff: defaultMaxBackoff}}
	} else {
		if builtin.Known(name) {
			return nil, bad("name", "%q is a built-in tool; declare it with kind: builtin", name)
		}
		t = &Tool{Name: name, Kind: KindHTTP, Effect: true, Timeout: defaultHTTPTimeout,
			Retry: Retry{MaxAttempts: defaultMaxAttempts, InitialBackoff: defaultInitialBackoff, MaxBackoff: defaultMaxBackoff}}
	}

	if e.Description.set {
		if !e.Description.ok {
			return nil, bad("description", "must be a string, got %s", show(e.Description.raw))
		}
		t.Description = e.Description.val
	}
	if e.Destructive.set {
		if !e.Destructive.ok {
			return nil, bad("destructive", "must be true or false, got %s", show(e.Destructive.raw))
		}
		b := e.Destructive.val
		t.Destructive = &b
	}
	if e.Effect.set {
		if !e.Effect.ok {
			return nil, bad("effect", "must be true or false, got %s", show(e.Effect.raw))
		}
		t.Effect = e.Effect.val
		t.effectSet = true
	}
	if e.Timeout.set {
		d, err := duration(e.Timeout)
		if err != nil {
			return nil, bad("timeout", "%v", err)
		}
		t.Timeout = d
	}
	if e.Concurrency.set {
		if !e.Concurrency.ok || e.Concurrency.val < 0 {
			return nil, bad("concurrency", "must be an integer >= 0 (0: no limit of its own), got %s", show(e.Concurrency.raw))
		}
		t.Concurrency = e.Concurrency.val
	}
	if e.Retry.shape.set {
		if err := parseRetry(e.Retry, &t.Retry); err != nil {
			return nil, fmt.Errorf("%s: retry%w", where, err)
		}
	}
	if e.Rate.shape.set {
		r, err := parseRate(e.Rate)
		if err != nil {
			return nil, fmt.Errorf("%s: rate%w", where, err)
		}
		t.Rate = r
	}
	if e.Breaker.shape.set {
		b, err := parseBreaker(e.Breaker)
		if err != nil {
			return nil, fmt.Errorf("%s: breaker%w", where, err)
		}
		t.Breaker = b
	}
	if e.Principals.set {
		p, err := parsePrincipals(e.Principals.raw)
		if err != nil {
			return nil, bad("principals", "%v", err)
		}
		t.Principals = p
	}
	if kind != KindBuiltin {
		if err := parseOnUnknown(e, t, bad); err != nil {
			return nil, err
		}
	}
	if kind == KindMCP {
		up, err := parseMCP(e, t, getenv, where, bad)
		if err != nil {
			return nil, err
		}
		t.upstream = up
		return t, nil
	}
	if kind == KindBuiltin {
		if err := setDedup(e.Dedup, t, where); err != nil {
			return nil, err
		}
		return t, nil
	}

	schema := []byte(`{"type": "object"}`)
	if e.Schema.set {
		b, err := json.Marshal(e.Schema.raw)
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
	if err := setDedup(e.Dedup, t, where); err != nil {
		return nil, err
	}

	// A Retry-After longer than the tool's longest backoff is not
	// honoured in full (docs/tools.md, "The http kind").
	cfg := httptool.Config{Name: name, Timeout: t.Timeout, Effect: t.Effect, MaxRetryAfter: t.Retry.MaxBackoff}
	if !e.URL.set {
		return nil, bad("url", "required for an http tool")
	}
	if !e.URL.ok {
		return nil, bad("url", "must be a string, got %s", show(e.URL.raw))
	}
	cfg.URL = e.URL.val
	if e.Method.set {
		if !e.Method.ok {
			return nil, bad("method", "must be a string, got %s", show(e.Method.raw))
		}
		cfg.Method = e.Method.val
	}
	if e.Headers.set {
		if !e.Headers.ok {
			return nil, bad("headers", "must be a mapping of header name to value")
		}
		hm := e.Headers.val
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
	if e.Lookup.shape.set {
		lc, err := parseLookup(e.Lookup)
		if err != nil {
			return nil, fmt.Errorf("%s: lookup%w", where, err)
		}
		cfg.Lookup = lc
	}
	if t.OnUnknown == OnUnknownLookup && cfg.Lookup == nil {
		return nil, bad("lookup", "required with on_unknown: lookup (the url that tells whether a call's effect happened)")
	}
	ht, err := httptool.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	if e.Reconcile.shape.set {
		rc, err := parseReconcile(e.Reconcile, cfg.Headers)
		if err != nil {
			return nil, fmt.Errorf("%s: reconcile%w", where, err)
		}
		t.Reconcile = rc
	}
	t.Method = cfg.Method
	if t.Method == "" {
		t.Method = "POST"
	}
	t.runner = ht
	return t, nil
}

// parseOnUnknown reads an http or mcp entry's on_unknown into t (default
// retry). An mcp entry cannot look up: MCP has no standard way to ask an
// upstream whether a tools/call's effect happened.
func parseOnUnknown(e toolEntry, t *Tool, bad func(field, format string, a ...any) error) error {
	t.OnUnknown = OnUnknownRetry
	if e.OnUnknown.set {
		if !e.OnUnknown.ok || !slices.Contains(OnUnknownPolicies, e.OnUnknown.val) {
			return bad("on_unknown", "must be one of %s, got %s", strings.Join(OnUnknownPolicies, ", "), show(e.OnUnknown.raw))
		}
		t.OnUnknown = e.OnUnknown.val
	}
	if t.Kind == KindMCP && t.OnUnknown == OnUnknownLookup {
		return bad("on_unknown", "%s", errMCPLookup)
	}
	return nil
}

// errMCPLookup refuses on_unknown: lookup, and a lookup, on an mcp entry.
const errMCPLookup = "an mcp entry cannot look up (MCP has no standard way to ask an upstream whether a call's " +
	"effect happened); use on_unknown: retry or hold"

// parseLookup checks a lookup field; its errors start with the place
// after "lookup" (".url: ...", or ": ..." for the field itself).
func parseLookup(e lookupEntry) (*httptool.LookupConfig, error) {
	if !e.shape.ok {
		return nil, fmt.Errorf(": must be a mapping with %s", strings.Join(lookupFields, ", "))
	}
	if k, found := e.shape.unknown(lookupFields); found {
		return nil, fmt.Errorf(".%s: unknown field (allowed: %s)", k, strings.Join(lookupFields, ", "))
	}
	if !e.URL.ok {
		return nil, fmt.Errorf(".url: required, a string, got %s", show(e.URL.raw))
	}
	lc := &httptool.LookupConfig{URL: e.URL.val}
	if e.Method.set {
		if !e.Method.ok {
			return nil, fmt.Errorf(".method: must be a string, got %s", show(e.Method.raw))
		}
		lc.Method = e.Method.val
	}
	for _, f := range []struct {
		name string
		v    opt[[]any]
		dst  *[]int
	}{{"found", e.Found, &lc.Found}, {"not_found", e.NotFound, &lc.NotFound}} {
		if !f.v.set {
			continue
		}
		if !f.v.ok {
			return nil, fmt.Errorf(".%s: must be a list of HTTP statuses, got %s", f.name, show(f.v.raw))
		}
		*f.dst = []int{}
		for _, x := range f.v.val {
			n, isInt := x.(int)
			if !isInt {
				return nil, fmt.Errorf(".%s: %s is not an HTTP status", f.name, show(x))
			}
			*f.dst = append(*f.dst, n)
		}
	}
	return lc, nil
}

// setDedup reads the entry's dedup field, if any, into t. It runs once
// t's schema is known: the args must be the schema's top-level properties.
func setDedup(d dedupEntry, t *Tool, where string) error {
	if !d.shape.set {
		return nil
	}
	rule, err := parseDedup(d, t.schemaJSON)
	if err != nil {
		return fmt.Errorf("%s: dedup%w", where, err)
	}
	t.Dedup = rule
	return nil
}

// parseDedup checks a dedup field; its errors start with the place after
// "dedup" (".window: ...", or ": ..." for the field itself).
func parseDedup(e dedupEntry, schemaJSON json.RawMessage) (*Dedup, error) {
	if !e.shape.ok {
		return nil, fmt.Errorf(": must be a mapping with %s", strings.Join(dedupFields, " and "))
	}
	if k, found := e.shape.unknown(dedupFields); found {
		return nil, fmt.Errorf(".%s: unknown field (allowed: %s)", k, strings.Join(dedupFields, ", "))
	}
	if !e.Args.ok || len(e.Args.val) == 0 {
		return nil, fmt.Errorf(".args: required, a non-empty list of argument names, got %s", show(e.Args.raw))
	}
	props := topProperties(schemaJSON)
	d := &Dedup{}
	for _, a := range e.Args.val {
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
	if !e.Window.set {
		return nil, errors.New(`.window: required, a duration such as "10m"`)
	}
	if !e.Window.ok {
		return nil, fmt.Errorf(".window: %s is not a duration (write it with a unit, e.g. \"10m\")", show(e.Window.raw))
	}
	s := e.Window.val
	dur, err := time.ParseDuration(s)
	if err != nil {
		return nil, fmt.Errorf(".window: %q is not a duration", s)
	}
	if dur <= 0 || dur > maxDedupWindow {
		return nil, fmt.Errorf(".window: %q must be above 0 and at most %s", s, maxDedupWindow)
	}
	d.Window = dur
	return d, nil
}

// parseRetry checks a retry field into r, whose defaults it keeps for what
// the field leaves out; its errors start with the place after "retry"
// (".max_attempts: ...", or ": ..." for the field itself). The keys are
// checked in sorted order, an unknown one where it sorts.
func parseRetry(e retryEntry, r *Retry) error {
	if !e.shape.ok {
		return fmt.Errorf(": must be a mapping with %s", strings.Join(retryFields, ", "))
	}
	for _, k := range e.shape.keys {
		switch k {
		case "max_attempts":
			n := e.MaxAttempts
			if !n.ok || n.val < 1 || n.val > maxAttemptsLimit {
				return fmt.Errorf(".max_attempts: must be an integer from 1 to %d, got %s", maxAttemptsLimit, show(n.raw))
			}
			r.MaxAttempts = n.val
		case "initial_backoff":
			d, err := duration(e.InitialBackoff)
			if err != nil {
				return fmt.Errorf(".%s: %v", k, err)
			}
			r.InitialBackoff = d
		case "max_backoff":
			d, err := duration(e.MaxBackoff)
			if err != nil {
				return fmt.Errorf(".%s: %v", k, err)
			}
			r.MaxBackoff = d
		default:
			return fmt.Errorf(".%s: unknown field (allowed: %s)", k, strings.Join(retryFields, ", "))
		}
	}
	if r.MaxBackoff < r.InitialBackoff {
		return fmt.Errorf(".max_backoff: %s is shorter than initial_backoff %s", r.MaxBackoff, r.InitialBackoff)
	}
	return nil
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

// duration reads a positive Go duration string ("10s", "200ms") up to
// maxTimeout.
func duration(v opt[string]) (time.Duration, error) {
	if !v.ok {
		return 0, fmt.Errorf("%s is not a duration (write it with a unit, e.g. \"10s\")", show(v.raw))
	}
	s := v.val
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration", s)
	}
	if d <= 0 || d > maxTimeout {
		return 0, fmt.Errorf("%q must be above 0 and at most %s", s, maxTimeout)
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
