// Package trustproxy says what a request's forwarding headers may be
// believed for: whether the client used HTTPS (X-Forwarded-Proto) and
// which address it came from (X-Forwarded-For). Anyone can send those
// headers, so they count only on a request whose peer is one of the
// configured proxies (serve --trusted-proxies); by default none is, and a
// request is what its own connection says.
package trustproxy

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// Proxies is a set of trusted proxy networks. The nil *Proxies trusts
// nobody.
type Proxies struct {
	nets []netip.Prefix
}

// Parse reads CIDRs ("10.0.0.0/8") or single addresses ("127.0.0.1");
// empty entries are skipped. An entry that is neither is an error naming
// it.
func Parse(list []string) (*Proxies, error) {
	p := &Proxies{}
	for _, e := range list {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		if pfx, err := netip.ParsePrefix(e); err == nil {
			p.nets = append(p.nets, pfx.Masked())
			continue
		}
		a, err := netip.ParseAddr(e)
		if err != nil {
			return nil, fmt.Errorf("trusted proxy %q: want a CIDR such as 10.0.0.0/8 or an IP address", e)
		}
		a = a.Unmap()
		p.nets = append(p.nets, netip.PrefixFrom(a, a.BitLen()))
	}
	return p, nil
}

// Len is how many networks are trusted.
func (p *Proxies) Len() int {
	if p == nil {
		return 0
	}
	return len(p.nets)
}

func (p *Proxies) trusts(a netip.Addr) bool {
	if p == nil || !a.IsValid() {
		return false
	}
	a = a.Unmap()
	for _, n := range p.nets {
		if n.Contains(a) {
			return true
		}
	}
	return false
}

// peer is the address of the request's connection.
func peer(r *http.Request) netip.Addr {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	a, _ := netip.ParseAddr(host)
	return a.Unmap()
}

// HTTPS reports whether the client reached the server over TLS: the
// connection itself is TLS, or a trusted proxy says so with
// "X-Forwarded-Proto: https" (the last value, the one that proxy set).
func (p *Proxies) HTTPS(r *http.Request) bool {
	if r.TLS != nil {
		return true
	}
	if !p.trusts(peer(r)) {
		return false
	}
	vals := r.Header.Values("X-Forwarded-Proto")
	if len(vals) == 0 {
		return false
	}
	parts := strings.Split(vals[len(vals)-1], ",")
	return strings.EqualFold(strings.TrimSpace(parts[len(parts)-1]), "https")
}

// ClientAddr is the address of the client: the connection's peer, or,
// when the peer is a trusted proxy, the rightmost X-Forwarded-For address
// that is not itself a trusted proxy (the leftmost ones are whatever the
// client wrote). The zero Addr when the peer cannot be parsed.
func (p *Proxies) ClientAddr(r *http.Request) netip.Addr {
	a := peer(r)
	if !p.trusts(a) {
		return a
	}
	var hops []string
	for _, v := range r.Header.Values("X-Forwarded-For") {
		hops = append(hops, strings.Split(v, ",")...)
	}
	for i := len(hops) - 1; i >= 0; i-- {
		h, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
		if err != nil {
			return a // a hop that is no address: trust nothing left of it
		}
		a = h.Unmap()
		if !p.trusts(a) {
			return a
		}
	}
	return a
}
