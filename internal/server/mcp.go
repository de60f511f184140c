package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemctl/idemctl/internal/callview"
	"github.com/idemctl/idemctl/internal/fingerprint"
	"github.com/idemctl/idemctl/internal/mcpdoor"
	"github.com/idemctl/idemctl/internal/netutil"
	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/toolreg"
	"github.com/idemctl/idemctl/internal/wire"
)

// mcpSessionTimeout closes an MCP session idle this long, so sessions of
// agents that went away without a DELETE do not pile up in memory.
const mcpSessionTimeout = 30 * time.Minute

// mcpHandler is the streamable HTTP transport of the MCP door at /mcp. It
// sits behind authenticate like every API path; the SDK's bearer
// middleware then hands the principal to the tool handlers (as the
// TokenInfo's UserID, which also ties an MCP session to its principal).
func (s *Server) mcpHandler() (http.Handler, error) {
	var sessions *mcpSessions // set below, before any request can arrive
	opts := mcpdoor.Options{Wait: s.cfg.MCPWait, Version: s.serviceVersion(), Allowed: s.toolAllowed,
		Initialized: func(id string) { sessions.initialized(id) },
		Unlisted:    func(principal, tool string) bool { return unlistedTool(s.cfg.Tools, tool, principal) },
		Tracer:      s.tracer}
	srv, err := mcpdoor.New(context.Background(), localCaller{s}, opts)
	if err != nil {
		return nil, err
	}
	// The tools of upstream MCP servers change when their lists are read
	// again: the door follows (docs/tools.md, "The mcp kind").
	doorTools := s.cfg.Tools.Names()
	s.cfg.Tools.OnRefresh(func() {
		names, err := mcpdoor.Sync(context.Background(), srv, localCaller{s}, opts, doorTools)
		if err != nil {
			s.log.Warn("mcp door: tools not updated after a refresh", "err", err)
		}
		doorTools = names
	})
	h := http.Handler(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv },
		&mcp.StreamableHTTPOptions{
			MaxRequestBodyBytes: MaxBodyBytes, // the API's body limit
			SessionTimeout:      mcpSessionTimeout,
			// On a loopback address hostGuard already checks every
			// route's Host, /mcp included, and honours --allowed-hosts,
			// which the SDK's own check would not.
			DisableLocalhostProtection: netutil.CheckLoopback(s.cfg.Addr) == nil,
		}))
	// A session's standing GET stream never ends by itself: without this,
	// one connected agent would hold every graceful stop for the whole
	// ShutdownGrace. Closing the sessions ends their streams; the agent's
	// SDK reconnects elsewhere, and its calls are safe to retry by key.
	go func() {
		<-s.closing
		for ss := range srv.Sessions() {
			_ = ss.Close()
		}
	}()
	if s.cfg.Auth != nil {
		verify := func(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
			p, ok := s.cfg.Auth.principal(token)
			if !ok {
				return nil, auth.ErrInvalidToken
			}
			return &auth.TokenInfo{UserID: p}, nil
		}
		h = auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(h)
	}
	sessions = newMCPSessions(srv, s.cfg.MaxMCPSessions, s.cfg.MaxMCPSessionsPerPrincipal, s.cfg.Auth)
	s.mcpSessions = sessions
	go sessions.watchRevocations(s.closing)
	return sessions.handler(s, h), nil
}

// localCaller is the door's Caller inside the server: the create-or-get
// path of POST /v1/tool-calls (submit) and its wait (holdWait).
type localCaller struct{ s *Server }

// Tools lists the registry.
func (c localCaller) Tools(context.Context) ([]mcpdoor.ToolInfo, error) {
	var out []mcpdoor.ToolInfo
	for _, t := range c.s.cfg.Tools.Tools() {
		out = append(out, mcpdoor.ToolInfo{Name: t.Name, Description: t.Description, Schema: t.Schema(),
			Effect: t.Effect, Destructive: t.Destructive, Dedup: t.Dedup != nil,
			Passthrough: t.Kind == toolreg.KindMCP, Annotations: t.Annotations})
	}
	return out, nil
}

// Submit checks the args as a POST body's are checked, then records or
// finds the call and waits as "Prefer: wait" does.
func (c localCaller) Submit(ctx context.Context, principal, key, tool string, args json.RawMessage, wait time.Duration) (mcpdoor.Call, bool, error) {
	if aerr := checkKey(key); aerr != nil {
		return mcpdoor.Call{}, false, doorError(aerr)
	}
	var rawArgs any
	if len(args) > 0 {
		v, err := fingerprint.ParseJSON(args) // refuses duplicate members, as for a body
		if err != nil {
			return mcpdoor.Call{}, false, doorError(badRequest("args: %v", err))
		}
		if path, found := findNUL(v, "$.args"); found {
			return mcpdoor.Call{}, false, doorError(badRequest("args: the string at %s contains U+0000 (NUL), which not every database can store", path))
		}
		rawArgs = v
	}
	req, aerr := checkToolCall(tool, rawArgs, c.s.cfg.Chaos, c.s.cfg.Tools, principal)
	if aerr != nil {
		return mcpdoor.Call{}, false, doorError(aerr)
	}
	req.Via = store.ViaMCP
	call, outcome, aerr := c.s.submit(ctx, principal, key, req)
	if aerr != nil {
		return mcpdoor.Call{}, false, doorError(aerr)
	}
	if !call.Status.Final() && wait > 0 {
		call, _ = c.s.holdWait(ctx, call, min(wait, c.s.cfg.MaxWait))
	}
	return doorCall(call), outcome != store.Created, nil
}

// Get reads a call of principal by id.
func (c localCaller) Get(ctx context.Context, principal, callID string) (mcpdoor.Call, error) {
	notFound := doorError(&apiError{status: http.StatusNotFound, code: wire.CodeNotFound, message: "no call with id " + strconv.Quote(callID)})
	if !isCallID(callID) {
		return mcpdoor.Call{}, notFound
	}
	call, err := c.s.st.Get(ctx, principal, callID)
	if errors.Is(err, store.ErrNotFound) {
		return mcpdoor.Call{}, notFound
	}
	if err != nil {
		return mcpdoor.Call{}, doorError(c.s.submitStoreError(ctx, err, ""))
	}
	return doorCall(call), nil
}

// GetByKey reads a call of principal by key.
func (c localCaller) GetByKey(ctx context.Context, principal, key string) (mcpdoor.Call, error) {
	notFound := doorError(&apiError{status: http.StatusNotFound, code: wire.CodeNotFound, message: "no call with idempotency key " + strconv.Quote(key)})
	if checkKey(key) != nil {
		return mcpdoor.Call{}, notFound
	}
	call, err := c.s.st.GetByKey(ctx, principal, key)
	if errors.Is(err, store.ErrNotFound) {
		return mcpdoor.Call{}, notFound
	}
	if err != nil {
		return mcpdoor.Call{}, doorError(c.s.submitStoreError(ctx, err, key))
	}
	return doorCall(call), nil
}

// List reads principal's newest calls.
func (c localCaller) List(ctx context.Context, principal, tool string, limit int) ([]mcpdoor.Call, error) {
	calls, err := c.s.st.ListCalls(ctx, store.ListFilter{Principal: &principal, Tool: tool, Limit: min(limit, MaxListLimit)})
	if err != nil {
		return nil, doorError(c.s.submitStoreError(ctx, err, ""))
	}
	out := make([]mcpdoor.Call, 0, len(calls))
	for _, call := range calls {
		out = append(out, doorCall(call))
	}
	return out, nil
}

// doorCall is a stored call as the door sees it: the API's call object.
func doorCall(c store.Call) mcpdoor.Call { return mcpdoor.Call{Call: callview.Of(c)} }

// doorError is an API refusal as the door's error.
func doorError(e *apiError) error {
	return &mcpdoor.Error{Code: e.code, Message: e.message, CallID: e.callID}
}
