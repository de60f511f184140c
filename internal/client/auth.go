package client

import (
	"net/http"

	"github.com/idemctl/idemctl/internal/wire"
)

// WithToken returns an *http.Client that sends "Authorization: Bearer
// token" on every request, for a server run with auth tokens (docs/api.md,
// "Authentication"); set it as Client.HTTP. hc is the client to wrap (nil:
// a default one, without an overall timeout, as Client expects); it is not
// modified. An empty token returns hc unchanged. The token is only ever put
// in that header: never in a URL, a log line or an error.
func WithToken(hc *http.Client, token string) *http.Client {
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
	out.Transport = bearerTransport{next: next, value: "Bearer " + token}
	return &out
}

// bearerTransport adds the Authorization header to a copy of each request
// (a RoundTripper must not change the request it is given).
type bearerTransport struct {
	next  http.RoundTripper
	value string
}

// CloseIdleConnections forwards to the wrapped transport, so
// http.Client.CloseIdleConnections still reaches it.
func (t bearerTransport) CloseIdleConnections() {
	if c, ok := t.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// RoundTrip sends r with the Authorization header set.
func (t bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r2 := r.Clone(r.Context())
	r2.Header.Set(wire.HeaderAuthorization, t.value)
	return t.next.RoundTrip(r2)
}
