package trustproxy_test

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/idemctl/idemctl/internal/trustproxy"
)

func request(remote string, hdr ...string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = remote
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Add(hdr[i], hdr[i+1])
	}
	return r
}

// TestHTTPS: X-Forwarded-Proto counts only from a trusted peer; TLS on the
// connection always counts.
func TestHTTPS(t *testing.T) {
	p, err := trustproxy.Parse([]string{"10.0.0.0/8", "::1"})
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		p    *trustproxy.Proxies
		r    *http.Request
		want bool
	}{
		"trusted https":         {p, request("10.1.2.3:5000", "X-Forwarded-Proto", "https"), true},
		"trusted v6 https":      {p, request("[::1]:5000", "X-Forwarded-Proto", "HTTPS"), true},
		"trusted http":          {p, request("10.1.2.3:5000", "X-Forwarded-Proto", "http"), false},
		"trusted, last wins":    {p, request("10.1.2.3:5000", "X-Forwarded-Proto", "https", "X-Forwarded-Proto", "http"), false},
		"trusted, no header":    {p, request("10.1.2.3:5000"), false},
		"untrusted https":       {p, request("192.0.2.7:5000", "X-Forwarded-Proto", "https"), false},
		"no proxies configured": {nil, request("10.1.2.3:5000", "X-Forwarded-Proto", "https"), false},
	} {
		if got := tc.p.HTTPS(tc.r); got != tc.want {
			t.Errorf("%s: HTTPS = %v, want %v", name, got, tc.want)
		}
	}
	tlsReq := request("192.0.2.7:5000")
	tlsReq.TLS = &tls.ConnectionState{}
	if !(*trustproxy.Proxies)(nil).HTTPS(tlsReq) {
		t.Error("a TLS connection is not HTTPS")
	}
}

// TestClientAddr: the peer, unless it is a trusted proxy; then the
// rightmost forwarded address that is not a trusted proxy.
func TestClientAddr(t *testing.T) {
	p, _ := trustproxy.Parse([]string{"10.0.0.0/8"})
	for name, tc := range map[string]struct {
		p    *trustproxy.Proxies
		r    *http.Request
		want string
	}{
		"direct":                {p, request("192.0.2.7:5000", "X-Forwarded-For", "198.51.100.1"), "192.0.2.7"},
		"through the proxy":     {p, request("10.0.0.2:5000", "X-Forwarded-For", "198.51.100.1"), "198.51.100.1"},
		"spoofed left of it":    {p, request("10.0.0.2:5000", "X-Forwarded-For", "1.2.3.4, 198.51.100.1"), "198.51.100.1"},
		"two proxies":           {p, request("10.0.0.2:5000", "X-Forwarded-For", "198.51.100.1, 10.0.0.9"), "198.51.100.1"},
		"several header lines":  {p, request("10.0.0.2:5000", "X-Forwarded-For", "198.51.100.1", "X-Forwarded-For", "10.0.0.9"), "198.51.100.1"},
		"garbage hop":           {p, request("10.0.0.2:5000", "X-Forwarded-For", "1.2.3.4, junk"), "10.0.0.2"},
		"no proxies configured": {nil, request("10.0.0.2:5000", "X-Forwarded-For", "198.51.100.1"), "10.0.0.2"},
		"v4-mapped peer":        {p, request("[::ffff:10.0.0.2]:5000", "X-Forwarded-For", "198.51.100.1"), "198.51.100.1"},
	} {
		if got := tc.p.ClientAddr(tc.r).String(); got != tc.want {
			t.Errorf("%s: ClientAddr = %s, want %s", name, got, tc.want)
		}
	}
}

func TestParseRefusesJunk(t *testing.T) {
	for _, e := range []string{"10.0.0.0/33", "proxy.example", "10.0.0.0/8/1"} {
		if _, err := trustproxy.Parse([]string{e}); err == nil {
			t.Errorf("Parse(%q) accepted it", e)
		}
	}
}
