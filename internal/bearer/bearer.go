// Package bearer wraps an *http.Client so that every request carries
// "Authorization: Bearer TOKEN", for the tools that talk to a server run
// with auth tokens (docs/api.md, "Authentication") through a plain HTTP
// client of their own (bench, tests). The public client sets the header
// itself (client.WithToken).
package bearer

import (
	"net/http"

	"github.com/idemctl/idemctl/internal/wire"
)

// Client returns a copy of hc that sends "Authorization: Bearer token" on
// every request. hc nil means a default client without an overall
// timeout; it is not modified. An empty token returns hc unchanged. The
// token is only ever put in that header: never in a URL, a log line or an
// error.
func Client(hc *http.Client, token string) *http.Client {
	if token == "" {
		return hc
	}
	if hc == nil {
		hc = &http.Client{}
	}
	out := *hc
	next := hc.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	out.Transport = transport{next: next, value: "Bearer " + token}
	return &out
}

// transport adds the Authorization header to a copy of each request (a
// RoundTripper must not change the request it is given).
type transport struct {
	next  http.RoundTripper
	value string
}

// CloseIdleConnections forwards to the wrapped transport, so
// http.Client.CloseIdleConnections still reaches it.
func (t transport) CloseIdleConnections() {
	if c, ok := t.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// RoundTrip sends r with the Authorization header set.
func (t transport) RoundTrip(r *http.Request) (*http.Response, error) {
	r2 := r.Clone(r.Context())
	r2.Header.Set(wire.HeaderAuthorization, t.value)
	return t.next.RoundTrip(r2)
}
