package server

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/idemctl/idemctl/internal/console"
	"github.com/idemctl/idemctl/internal/logkey"
	"github.com/idemctl/idemctl/internal/store"

	"github.com/idemctl/idemctl/internal/toolreg"
	"github.com/idemctl/idemctl/internal/wire"
)

// The tool registry's part in the API (docs/api.md, "Tools"): checking a
// call's args at accept time and listing the tools. Kept in one place so
// the handlers need nothing else of the registry.

// knownTool reports whether reg has a tool of that name.
func knownTool(reg *toolreg.Registry, tool string) bool {
	_, ok := reg.Lookup(tool)
	return ok
}

// unlistedTool reports whether tool is one of an upstream MCP server's
// that principal may call but that is not listed yet (the upstream has
// been down since the start, or does not offer a tool its entry names):
// 503 upstream_unavailable, not 400, since the same request may pass
// once the upstream answers (docs/tools.md, "The mcp kind").
func unlistedTool(reg *toolreg.Registry, tool, principal string) bool {
	return !knownTool(reg, tool) && reg.For(principal).Unavailable(tool)
}

func upstreamUnavailable(tool string) *apiError {
	return &apiError{status: http.StatusServiceUnavailable, code: wire.CodeUpstreamUnavailable,
		message: fmt.Sprintf("tool %q belongs to an upstream MCP server that has not listed it yet; nothing was stored, retry later", tool)}
}

// validateArgs checks a call's (normalized) args against its tool in reg:
// a refusal is 400 bad_request naming the failing argument (for a schema,
// its JSON Pointer in the body, "/args/amount").
func validateArgs(reg *toolreg.Registry, tool string, args map[string]any, chaos bool) *apiError {
	if err := reg.Validate(tool, args, chaos); err != nil {
		return badRequest("%v", err)
	}
	return nil
}

// handleTools answers GET /v1/tools: {"tools": [...]}, each tool the
// request's principal may call with its kind, description, args schema and
// policy. Never a URL, a header or who else may call it.
func (s *Server) handleTools(w http.ResponseWriter, r *http.Request) {
	l, err := s.toolsWithState(r.Context(), s.cfg.Tools.For(principalOf(r.Context())))
	if err != nil {
		s.storeError(w, r, err)
		return
	}
	writeJSON(w, s.log, http.StatusOK, l)
}

// refuseCircuitOpen fails a new call of a tool whose breaker is open and
// fails fast (breaker.fail_fast; docs/tools.md, "Circuit breakers"): 503
// circuit_open with Retry-After at the end of the cooldown, storing
// nothing, so the same key may be sent again then. A key already recorded
// is served as always (a replay, a retry reset): it is the client's own
// call, and the breaker only holds it pending. nil means go on.
func (s *Server) refuseCircuitOpen(ctx context.Context, principal, key, tool string, left time.Duration) *apiError {
	_, err := s.st.GetByKey(ctx, principal, key)
	switch {
	case err == nil:
		return nil
	case !errors.Is(err, store.ErrNotFound):
		return s.submitStoreError(ctx, err, key)
	}
	s.m.calls.WithLabelValues(callsCircuitOpen).Inc()
	secs := int(math.Ceil(left.Seconds()))
	s.log.Info("new call refused: the tool's circuit breaker is open", logkey.Key, key, logkey.Tool, tool,
		logkey.Principal, principal, "retry_after_s", secs)
	return &apiError{status: http.StatusServiceUnavailable, code: wire.CodeCircuitOpen, retryAfter: secs,
		message: fmt.Sprintf("tool %q: its circuit breaker is open (the downstream keeps failing); nothing was recorded, retry with the same key in %d s", tool, secs)}
}

// toolsWithState is the listing of GET /v1/tools with each breaker's
// state as the store holds it now (shared by every instance).
func (s *Server) toolsWithState(ctx context.Context, reg *toolreg.Registry) (wire.Tools, error) {
	l := reg.Listing()
	guarded := false
	for _, t := range l.Tools {
		guarded = guarded || t.Breaker != nil
	}
	if !guarded {
		return l, nil
	}
	states, err := s.st.GateStates(ctx)
	if err != nil {
		return l, err
	}
	for i, t := range l.Tools {
		if t.Breaker == nil {
			continue
		}
		for _, st := range states {
			if st.Tool != t.Name {
				continue
			}
			b := *t.Breaker
			b.State, b.ConsecutiveFailures = st.Breaker, st.Failures
			if st.Breaker != store.BreakerClosed {
				until := st.Until
				b.Until = &until
			}
			l.Tools[i].Breaker = &b
		}
	}
	return l, nil
}

// consoleGates is the console overview's table of guarded tools: those
// principal may call that have a rate limit or a breaker, with the state
// the store holds now. The tokens are computed at this host's clock (the
// database's may differ by the skew between them; it is a display); a
// tool is throttling when its bucket is empty and it has pending calls.
func (s *Server) consoleGates(ctx context.Context, principal string) ([]console.Gate, error) {
	var tools []*toolreg.Tool
	for _, t := range s.cfg.Tools.For(principal).Tools() {
		if t.Gate().Guarded() {
			tools = append(tools, t)
		}
	}
	if len(tools) == 0 {
		return nil, nil
	}
	states, err := s.st.GateStates(ctx)
	if err != nil {
		return nil, err
	}
	now := float64(time.Now().UnixNano()) / 1e9
	out := make([]console.Gate, 0, len(tools))
	for _, t := range tools {
		g := t.Gate()
		st := store.NewGateState(g, now)
		for _, row := range states {
			if row.Tool == t.Name {
				st = row
			}
		}
		v := console.Gate{Tool: t.Name}
		if r := g.Rate; r != nil {
			v.Rate = fmt.Sprintf("%d per %s, burst %d", r.Limit, r.Per, r.Burst)
			v.Tokens = st.TokensAt(g, now)
			v.Throttles = s.exec.Throttles(t.Name)
			if v.Tokens < 1 {
				// Throttling: the bucket is empty and calls of the tool
				// wait (any principal's, as the counts are server-wide).
				waiting, err := s.st.ListCalls(ctx, store.ListFilter{Tool: t.Name, Status: store.StatusPending, Limit: 1})
				if err != nil {
					return nil, err
				}
				v.Throttled = len(waiting) > 0
			}
		}
		if b := g.Breaker; b != nil {
			v.Breaker, v.Failures, v.Until, v.FailFast = st.Breaker, st.Failures, st.Until, b.FailFast
		}
		out = append(out, v)
	}
	return out, nil
}
