package server

import (
	"github.com/idemctl/idemctl/internal/authlimit"
	"github.com/idemctl/idemctl/internal/trustproxy"
)

// codeAuthThrottled is 429 for a client that failed to authenticate too
// often (docs/api.md, "Authentication").
const codeAuthThrottled = authlimit.Code

// setupClients reads Config.TrustedProxies and builds the throttle of
// failed authentications, which the API and the console share, keyed by
// the client's address as the trusted proxies report it.
func (s *Server) setupClients() error {
	p, err := trustproxy.Parse(s.cfg.TrustedProxies)
	if err != nil {
		return err
	}
	s.proxies = p
	s.authLimit = authlimit.New(authlimit.Config{ClientAddr: p.ClientAddr, Logger: s.log})
	return nil
}
