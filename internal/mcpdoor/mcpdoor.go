// Package mcpdoor is idemctl's Model Context Protocol front door
// (docs/mcp.md): it turns every tool of a registry into an idempotent MCP
// tool. A tools/call is taken with an idempotency key and goes through the
// same create-or-get path as POST /v1/tool-calls, behind a Caller: the
// server's own (idemctl serve, at /mcp) or one backed by the HTTP client
// (idemctl mcp, on stdio). The MCP side is the official Go SDK.
package mcpdoor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemctl/idemctl/internal/idemkey"
	"github.com/idemctl/idemctl/internal/wire"
)

// Names of the key carriers and of the helper tools (docs/mcp.md).
const (
	// MetaKey is the params._meta member that carries an idempotency key;
	// it wins over the argument.
	MetaKey = "io.idemctl/idempotency-key"
	// KeyArg is the tool argument that carries an idempotency key. It is
	// removed from the args before validation and fingerprinting.
	KeyArg = "idempotency_key"
	// GetCallTool and ListCallsTool are the read-only helper tools.
	GetCallTool   = "idemctl_get_call"
	ListCallsTool = "idemctl_list_calls"
	// DefaultWait is how long a tools/call waits for its call to be final
	// before answering "still running".
	DefaultWait = 10 * time.Second
	// DefaultListLimit and MaxListLimit bound idemctl_list_calls.
	DefaultListLimit = 20
	MaxListLimit     = 100
	// autoKeyPrefix starts the key made for a call without one of a tool
	// without effects.
	autoKeyPrefix = "mcp-auto-"
)

// Error types: structuredContent.type of a tool error (docs/mcp.md,
// "Errors"). Refusals of the API pass their code through (bad_request,
// overloaded, unavailable, not_found, internal).
const (
	TypeConflict    = "idempotency_key_conflict"
	TypeKeyRequired = "idempotency_key_required"
	TypeInvalidKey  = "invalid_idempotency_key"
	TypeToolFailed  = wire.CodeToolFailed
	TypeRunning     = "still_running"
)

// ToolInfo is what the door needs to know of a registry tool.
type ToolInfo struct {
	Name        string
	Description string
	// Schema is the JSON Schema of the tool's args.
	Schema json.RawMessage
	// Effect: a success records an effect; such a tool never runs without
	// a key.
	Effect bool
	// Destructive is the tool's hint; nil means "as Effect".
	Destructive *bool
	// Dedup: the tool has an intent-deduplication rule, so a call without
	// a key runs under a fresh key and the server answers a repeat of the
	// same intent with the earlier call.
	Dedup bool
	// Passthrough: the tool is an upstream MCP server's, its stored
	// result is the upstream's CallToolResult, which the door answers
	// unchanged, and Annotations are the upstream's (docs/mcp.md).
	Passthrough bool
	Annotations json.RawMessage
}

// Call is a recorded call as the door shows it: the API's call object
// (docs/api.md, "The call object"), with the bytes the API rendered when
// the Caller has them (Raw).
type Call = wire.ReceivedCall

// Error is a refusal of the API: its stable code (docs/api.md, "Errors"),
// its message, and for a conflict the call the key names.
type Error = wire.ErrorDetail

// Caller is the seam between the door and an idemctl server: the same
// create-or-get + wait path POST /v1/tool-calls uses, and the reads.
// Errors the API answers with are *Error; principal is who the MCP client
// authenticated as (a Caller backed by a token may ignore it).
type Caller interface {
	Tools(ctx context.Context) ([]ToolInfo, error)
	// Submit records or finds the call of key and waits up to wait for it
	// to be final; replayed says the key was already recorded.
	Submit(ctx context.Context, principal, key, tool string, args json.RawMessage, wait time.Duration) (call Call, replayed bool, err error)
	Get(ctx context.Context, principal, callID string) (Call, error)
	GetByKey(ctx context.Context, principal, key string) (Call, error)
	// List returns principal's most recent calls of tool ("" any), newest
	// first.
	List(ctx context.Context, principal, tool string, limit int) ([]Call, error)
}

// Options configure New.
type Options struct {
	// Wait is how long tools/call waits for a final call; 0 means
	// DefaultWait.
	Wait time.Duration
	// Version is reported to MCP clients.
	Version string
	// Principal returns who a request authenticated as; nil means the
	// TokenInfo's UserID (the streamable HTTP handler's bearer auth), or ""
	// without one.
	Principal func(req mcp.Request) string
	// Allowed reports whether principal may call tool; tools/list shows
	// a principal only those. nil: every tool is everyone's. (A call of
	// another is the Caller's to refuse.)
	Allowed func(principal, tool string) bool
	// Initialized, if set, is told the id of each session whose client
	// finished initializing (sent notifications/initialized): the server
	// closes sessions that never do sooner than idle ones.
	Initialized func(sessionID string)
	// Unlisted, if set, reports whether tool is one principal may call
	// that an upstream MCP server has not listed yet: the SDK knows no
	// such tool, so without this its tools/call would be an unknown
	// tool's protocol error, where the HTTP API answers 503
	// upstream_unavailable (docs/tools.md, "The mcp kind").
	Unlisted func(principal, tool string) bool
	// Tracer, if set, traces each tools/call of a registry tool
	// (tracing.go); nil: no tracing work.
	Tracer trace.Tracer
}

// New builds an MCP server whose tools are c's tools plus the two helper
// tools.
func New(ctx context.Context, c Caller, opts Options) (*mcp.Server, error) {
	if opts.Wait <= 0 {
		opts.Wait = DefaultWait
	}
	if opts.Principal == nil {
		opts.Principal = tokenPrincipal
	}
	infos, err := c.Tools(ctx)
	if err != nil {
		return nil, fmt.Errorf("mcp: listing tools: %w", err)
	}
	srv := mcp.NewServer(&mcp.Implementation{Name: "idemctl", Version: opts.Version}, &mcp.ServerOptions{
		Instructions: "Every tool call is recorded under an idempotency key: pass one (the idempotency_key argument, " +
			"or params._meta[\"" + MetaKey + "\"]) and reuse it on every retry of the same call; a retry then " +
			"returns the first call's result and never repeats its effect.",
		InitializedHandler: func(_ context.Context, req *mcp.InitializedRequest) {
			if opts.Initialized != nil && req.Session != nil {
				opts.Initialized(req.Session.ID())
			}
		},
	})
	d := &door{c: c, opts: opts}
	if err := d.addTools(srv, infos); err != nil {
		return nil, err
	}
	srv.AddTool(getCallTool(), d.getCall)
	srv.AddTool(listCallsTool(), d.listCalls)
	if opts.Allowed != nil {
		srv.AddReceivingMiddleware(d.listAllowed)
	}
	if opts.Unlisted != nil {
		srv.AddReceivingMiddleware(d.unlisted)
	}
	return srv, nil
}

// unlisted answers a tools/call of a tool its upstream has not listed yet
// as the HTTP API does (upstream_unavailable: retry later, nothing was
// recorded), in a result the agent can read, instead of the SDK's
// unknown-tool error, which tells it the tool does not exist.
func (d *door) unlisted(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method != "tools/call" {
			return next(ctx, method, req)
		}
		p, ok := req.GetParams().(*mcp.CallToolParamsRaw)
		if !ok || p == nil || !d.opts.Unlisted(d.opts.Principal(req), p.Name) {
			return next(ctx, method, req)
		}
		return toolError(wire.CodeUpstreamUnavailable, fmt.Sprintf("tool %q belongs to an upstream MCP server that "+
			"has not listed it yet; nothing was recorded, retry later with the same idempotency key", p.Name), nil), nil
	}
}

// addTools adds (or replaces) a handler for each of infos.
func (d *door) addTools(srv *mcp.Server, infos []ToolInfo) error {
	for _, info := range infos {
		if info.Name == GetCallTool || info.Name == ListCallsTool {
			return fmt.Errorf("mcp: tool %q has the name of an idemctl helper tool", info.Name)
		}
		tool, err := mcpTool(info)
		if err != nil {
			return err
		}
		srv.AddTool(tool, d.callHandler(info))
	}
	return nil
}

// Sync brings the tools of srv, a server New built with the same c and
// opts, in line with c's tools now: the tools of an upstream MCP server
// change when its list is read again (docs/tools.md, "The mcp kind").
// prev are the names the last New or Sync registered; Sync returns the
// names it registered. The SDK tells connected clients that the list
// changed.
func Sync(ctx context.Context, srv *mcp.Server, c Caller, opts Options, prev []string) ([]string, error) {
	if opts.Wait <= 0 {
		opts.Wait = DefaultWait
	}
	if opts.Principal == nil {
		opts.Principal = tokenPrincipal
	}
	infos, err := c.Tools(ctx)
	if err != nil {
		return prev, fmt.Errorf("mcp: listing tools: %w", err)
	}
	now := make([]string, 0, len(infos))
	for _, info := range infos {
		now = append(now, info.Name)
	}
	var gone []string
	for _, n := range prev {
		if !slices.Contains(now, n) {
			gone = append(gone, n)
		}
	}
	srv.RemoveTools(gone...)
	if err := (&door{c: c, opts: opts}).addTools(srv, infos); err != nil {
		return prev, err
	}
	return now, nil
}

// listAllowed filters tools/list down to the tools the request's principal
// may call (the helper tools are everyone's: they read the principal's own
// calls). One server serves every session, so the filter is per request.
func (d *door) listAllowed(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		res, err := next(ctx, method, req)
		list, ok := res.(*mcp.ListToolsResult)
		if err != nil || !ok {
			return res, err
		}
		principal := d.opts.Principal(req)
		kept := make([]*mcp.Tool, 0, len(list.Tools))
		for _, t := range list.Tools {
			if t.Name == GetCallTool || t.Name == ListCallsTool || d.opts.Allowed(principal, t.Name) {
				kept = append(kept, t)
			}
		}
		filtered := *list // the SDK's result is fresh per request; copied all the same
		filtered.Tools = kept
		// The list depends on who asks: no shared cache may keep it.
		filtered.CacheScope = "private"
		return &filtered, nil
	}
}

// tokenPrincipal is the principal of the bearer token the streamable HTTP
// handler verified, "" without one.
func tokenPrincipal(req mcp.Request) string {
	if extra := req.GetExtra(); extra != nil && extra.TokenInfo != nil {
		return extra.TokenInfo.UserID
	}
	return ""
}

// mcpTool is the MCP listing of a registry tool: its schema with the
// optional idempotency_key property added, and its hints.
func mcpTool(info ToolInfo) (*mcp.Tool, error) {
	schema := map[string]any{}
	var v any
	if err := json.Unmarshal(info.Schema, &v); err != nil {
		return nil, fmt.Errorf("mcp: tool %q: schema: %w", info.Name, err)
	}
	switch x := v.(type) {
	case map[string]any:
		schema = x
	case bool: // true: anything; MCP wants an object schema
	default:
		return nil, fmt.Errorf("mcp: tool %q: schema is not an object", info.Name)
	}
	if _, ok := schema["type"]; !ok {
		schema["type"] = "object"
	}
	props, _ := schema["properties"].(map[string]any)
	if props == nil {
		props = map[string]any{}
	}
	props[KeyArg] = map[string]any{
		"type": "string", "minLength": 1, "maxLength": idemkey.MaxLength, "pattern": "^[!-~]+$",
		"description": "Idempotency key: one per logical call, reused unchanged on every retry of it " +
			"(1-255 visible ASCII characters). Not passed to the tool.",
	}
	schema["properties"] = props
	destructive := info.Effect
	if info.Destructive != nil {
		destructive = *info.Destructive
	}
	ann := &mcp.ToolAnnotations{
		IdempotentHint:  true, // under a key, which the door requires for effects
		DestructiveHint: &destructive,
		ReadOnlyHint:    !info.Effect && !destructive,
	}
	if len(info.Annotations) > 0 {
		// An upstream tool's own annotations (title, openWorldHint...),
		// idempotent now that idemctl runs it under a key.
		ann = &mcp.ToolAnnotations{}
		if err := json.Unmarshal(info.Annotations, ann); err != nil {
			return nil, fmt.Errorf("mcp: tool %q: annotations: %w", info.Name, err)
		}
		ann.IdempotentHint = true
	}
	return &mcp.Tool{
		Name:        info.Name,
		Description: info.Description,
		InputSchema: schema,
		Annotations: ann,
	}, nil
}

// door holds the tool handlers.
type door struct {
	c    Caller
	opts Options
}

// callHandler is tools/call of a registry tool.
func (d *door) callHandler(info ToolInfo) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		args, key, res := takeKey(req.Params)
		if res != nil {
			return res, nil
		}
		if key == "" {
			if info.Effect && !info.Dedup {
				return toolError(TypeKeyRequired, fmt.Sprintf("tool %s has effects: pass an idempotency key "+
					"(the %s argument, or params._meta[%q]) and reuse it on every retry; nothing was recorded",
					info.Name, KeyArg, MetaKey), nil), nil
			}
			// No effects: nothing can happen twice, so each key-less call is
			// a call of its own under a fresh key. A dedup rule: the fresh
			// key is answered with a recent call of the same intent, if
			// any (docs/mcp.md).
			key = newAutoKey()
		}
		ctx, span := d.startCall(ctx, req, info.Name)
		call, replayed, err := d.c.Submit(ctx, d.opts.Principal(req), key, info.Name, args, d.opts.Wait)
		endCall(span, call, err)
		if err != nil {
			return errorResult(err, key)
		}
		if info.Passthrough {
			if r, ok := upstreamResult(call, replayed); ok {
				return r, nil
			}
		}
		return callResult(call, replayed), nil
	}
}

// takeKey removes the key carriers from a tools/call: the key from
// params._meta first, else from the idempotency_key argument (which is
// always removed). A malformed carrier is a tool error (res).
func takeKey(p *mcp.CallToolParamsRaw) (args json.RawMessage, key string, res *mcp.CallToolResult) {
	args = p.Arguments
	var obj map[string]json.RawMessage
	if len(args) > 0 && string(args) != "null" {
		// Arguments that are no object are left to the API to refuse.
		if json.Unmarshal(args, &obj) == nil {
			if raw, ok := obj[KeyArg]; ok {
				if err := json.Unmarshal(raw, &key); err != nil || key == "" {
					return nil, "", toolError(TypeInvalidKey, "the "+KeyArg+" argument must be a non-empty string", nil)
				}
				delete(obj, KeyArg)
				args, _ = json.Marshal(obj) // a map of raw values always marshals
			}
		}
	}
	if v, ok := p.Meta[MetaKey]; ok {
		s, isString := v.(string)
		if !isString || s == "" {
			return nil, "", toolError(TypeInvalidKey, "params._meta[\""+MetaKey+"\"] must be a non-empty string", nil)
		}
		key = s
	}
	if key != "" {
		if err := idemkey.Check(key); err != nil {
			return nil, "", toolError(TypeInvalidKey, "idempotency key "+err.Error(), nil)
		}
	}
	return args, key, nil
}

// newAutoKey is a fresh key for a key-less call of a tool without effects.
func newAutoKey() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return autoKeyPrefix + hex.EncodeToString(b[:])
}

// callResult answers a call: its result when it succeeded, its error
// object (isError) when it failed, "still running" otherwise. _meta names
// the call, its key and whether it was a replay.
func callResult(c Call, replayed bool) *mcp.CallToolResult {
	meta := mcp.Meta{"io.idemctl/call-id": c.CallID, MetaKey: c.IdemKey, "io.idemctl/replayed": replayed,
		"io.idemctl/status": c.Status}
	switch c.Status {
	case wire.StatusSucceeded:
		var v any = map[string]any{}
		if len(c.Result) > 0 {
			_ = json.Unmarshal(c.Result, &v) // the API's own JSON
		}
		if _, isObject := v.(map[string]any); !isObject {
			v = map[string]any{"result": v} // structuredContent is an object
		}
		return &mcp.CallToolResult{Meta: meta, StructuredContent: v, Content: textOf(v)}
	case wire.StatusFailed:
		var e any
		if len(c.Error) > 0 {
			_ = json.Unmarshal(c.Error, &e)
		}
		r := toolError(TypeToolFailed, "the call failed; a retry with the same key returns this failure again",
			map[string]any{"call_id": c.CallID, "idempotency_key": c.IdemKey, "error": e})
		r.Meta = meta
		return r
	}
	body := map[string]any{"type": TypeRunning, "call_id": c.CallID, "idempotency_key": c.IdemKey, "status": c.Status,
		"message": "the call is still running: call the tool again with the same arguments and idempotency key " +
			"for its result (never a second effect), or use " + GetCallTool}
	return &mcp.CallToolResult{Meta: meta, StructuredContent: body, Content: textOf(body)}
}

// upstreamResult is a final call of an upstream MCP tool as the upstream
// answered it: its CallToolResult, stored whole, with idemctl's keys added
// to _meta. A failure that has no CallToolResult (the upstream could not
// be reached) is answered as any tool's.
func upstreamResult(c Call, replayed bool) (*mcp.CallToolResult, bool) {
	var stored json.RawMessage
	switch c.Status {
	case wire.StatusSucceeded:
		stored = c.Result
	case wire.StatusFailed:
		var e wire.CallError
		if json.Unmarshal(c.Error, &e) != nil || e.Code != wire.CodeUpstreamToolError {
			return nil, false
		}
		stored = e.Body
	default:
		return nil, false
	}
	var r mcp.CallToolResult
	if len(stored) == 0 || json.Unmarshal(stored, &r) != nil {
		return nil, false
	}
	if r.Meta == nil {
		r.Meta = mcp.Meta{}
	}
	r.Meta["io.idemctl/call-id"], r.Meta[MetaKey] = c.CallID, c.IdemKey
	r.Meta["io.idemctl/replayed"], r.Meta["io.idemctl/status"] = replayed, c.Status
	return &r, true
}

// errorResult turns a Caller error into a tool error; an error that is no
// *Error (the Caller could not reach its server) is a tool error too, since
// the agent can retry with the same key.
func errorResult(err error, key string) (*mcp.CallToolResult, error) {
	var ae *Error
	if !errors.As(err, &ae) {
		return toolError(wire.CodeUnavailable, "the call could not be submitted; retry with the same idempotency key: "+err.Error(),
			map[string]any{"idempotency_key": key}), nil
	}
	typ := ae.Code
	if typ == wire.CodeIdempotencyConflict {
		typ = TypeConflict
	}
	extra := map[string]any{"idempotency_key": key}
	if ae.CallID != "" {
		extra["call_id"] = ae.CallID
	}
	return toolError(typ, ae.Message, extra), nil
}

// toolError is an isError result whose structuredContent is
// {"type": typ, "message": msg, ...extra}.
func toolError(typ, msg string, extra map[string]any) *mcp.CallToolResult {
	body := map[string]any{"type": typ, "message": msg}
	for k, v := range extra {
		body[k] = v
	}
	return &mcp.CallToolResult{IsError: true, StructuredContent: body, Content: textOf(body)}
}

// textOf is v as JSON text content, for clients that read no structured
// content.
func textOf(v any) []mcp.Content {
	b, err := json.Marshal(v)
	if err != nil {
		b = []byte(fmt.Sprint(v))
	}
	return []mcp.Content{&mcp.TextContent{Text: string(b)}}
}
