// Package hostcheck defends a server on a loopback address against DNS
// rebinding: a web page on evil.example can make its own name resolve to
// 127.0.0.1, and the browser then sends the page's requests, with
// "Host: evil.example", to the local server as if they were same-origin.
// The Host header is the one thing such a request cannot fake, so a
// loopback server answers only requests whose Host is a loopback name or
// address, or one the operator allowed (serve --allowed-hosts), as Jupyter
// and Vite do.
package hostcheck

import (
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/idemctl/idemctl/internal/wire"
)

// Code is the error code of a refused request (docs/api.md, "Errors").
const Code = wire.CodeHostNotAllowed

// Checker decides which Host headers a loopback server answers.
type Checker struct {
	// names are allowed host names, lower case; suffixes are the
	// ".example.com" entries, which allow that domain and every name
	// under it.
	names    map[string]bool
	suffixes []string
}

// New returns a Checker that accepts the loopback names and addresses and
// the given hosts. An entry is a host name or IP address without a port
// (any port is accepted), case-insensitive; an entry starting with '.'
// also allows every name under it (".example.com": example.com,
// a.example.com). An entry with a port, a scheme, a path or a wildcard is
// an error naming it.
func New(allowed []string) (*Checker, error) {
	c := &Checker{names: map[string]bool{}}
	for _, a := range allowed {
		e := strings.ToLower(strings.TrimSpace(a))
		if e == "" {
			continue
		}
		if err := checkEntry(e); err != nil {
			return nil, err
		}
		if strings.HasPrefix(e, ".") {
			c.suffixes = append(c.suffixes, e)
			c.names[e[1:]] = true
			continue
		}
		c.names[strings.Trim(e, "[]")] = true
	}
	return c, nil
}

func checkEntry(e string) error {
	if ip := net.ParseIP(strings.Trim(e, "[]")); ip != nil {
		return nil
	}
	name := strings.TrimPrefix(e, ".")
	if name == "" || strings.ContainsAny(name, ":/*@ ") {
		return fmt.Errorf("allowed host %q: give a host name or IP address without a port, scheme or wildcard (a leading '.' allows the names under a domain)", e)
	}
	return nil
}

// Allowed reports whether a request with this Host header (with or
// without a port) may be answered: localhost and the names under
// .localhost (which browsers resolve to loopback themselves, so no DNS
// answer can rebind them), an address in 127.0.0.0/8 or ::1, or an allowed
// host. An empty Host is refused: every browser sends one.
func (c *Checker) Allowed(hostport string) bool {
	host := strings.ToLower(hostport)
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.Trim(host, "[]"), ".") // "localhost." is localhost
	if host == "" {
		return false
	}
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return true
	}
	if c == nil {
		return false
	}
	if c.names[host] {
		return true
	}
	for _, s := range c.suffixes {
		if strings.HasSuffix(host, s) {
			return true
		}
	}
	return false
}

// Wrap answers through refuse, and never reaches next, every request
// whose Host is not Allowed.
func (c *Checker) Wrap(next http.Handler, refuse func(w http.ResponseWriter, r *http.Request)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !c.Allowed(r.Host) {
			refuse(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Message is the refusal's text for a request to host.
func Message(host string) string {
	return fmt.Sprintf("this server listens on a loopback address and answers only Host localhost, 127.0.0.1 or [::1]; "+
		"Host %q is not allowed (serve --allowed-hosts adds names)", truncate(host, 100))
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
