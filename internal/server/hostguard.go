package server

import (
	"net/http"

	"github.com/idemctl/idemctl/internal/hostcheck"
	"github.com/idemctl/idemctl/internal/netutil"
)

// codeHostNotAllowed is a request refused by the DNS-rebinding guard.
const codeHostNotAllowed = hostcheck.Code

// hostGuard refuses, on every route, a request whose Host is not a
// loopback name or one of Config.AllowedHosts, when the server listens on
// a loopback address (hostcheck: a rebound page's requests carry its own
// name). A server on another address is reached by names the operator
// chose, and there auth is what protects it.
func (s *Server) hostGuard(next http.Handler) (http.Handler, error) {
	if netutil.CheckLoopback(s.cfg.Addr) != nil {
		return next, nil
	}
	c, err := hostcheck.New(s.cfg.AllowedHosts)
	if err != nil {
		return nil, err
	}
	return c.Wrap(next, func(w http.ResponseWriter, r *http.Request) {
		writeError(w, s.log, http.StatusForbidden, codeHostNotAllowed, hostcheck.Message(r.Host))
	}), nil
}
