package server

import (
	"fmt"
	"net/http"

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
	writeJSON(w, s.log, http.StatusOK, s.cfg.Tools.For(principalOf(r.Context())))
}
