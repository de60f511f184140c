package server

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/idemctl/idemctl/internal/toolreg"
	"github.com/idemctl/idemctl/internal/wire"
)

// toolAccess refuses, with 403 tool_forbidden, a call of a registered tool
// principal may not call. Both doors check it before anything is stored.
func toolAccess(reg *toolreg.Registry, tool, principal string) *apiError {
	t, ok := reg.Lookup(tool)
	if !ok || t.Allows(principal) {
		return nil
	}
	return &apiError{status: http.StatusForbidden, code: wire.CodeToolForbidden,
		message: fmt.Sprintf("this principal may not call tool %q (the tools file names who may)", tool)}
}

// CheckToolAccess checks the principals the tools file names against the
// principals' rules (CheckPrincipal), and that the server authenticates
// callers at all: without tokens every caller is the default principal,
// which no list can name, so a restricted tool could never be called.
func CheckToolAccess(reg *toolreg.Registry, auth bool) error {
	var errs []error
	for _, t := range reg.Tools() {
		if t.Principals == nil {
			continue
		}
		if !auth {
			errs = append(errs, fmt.Errorf("tool %s: principals: restricting a tool needs auth tokens (without them every caller is the same, unnamed principal)", t.Name))
			continue
		}
		for _, p := range t.Principals {
			if err := CheckPrincipal(p); err != nil {
				errs = append(errs, fmt.Errorf("tool %s: principals: %w", t.Name, err))
			}
		}
	}
	return errors.Join(errs...)
}

// toolAllowed reports whether principal may call tool (the MCP door's
// tools/list filter).
func (s *Server) toolAllowed(principal, tool string) bool {
	t, ok := s.cfg.Tools.Lookup(tool)
	return ok && t.Allows(principal)
}
