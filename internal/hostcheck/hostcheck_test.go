package hostcheck_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/idemctl/idemctl/internal/hostcheck"
)

// TestAllowed: the loopback names and addresses pass with or without a
// port, any other Host (a rebound name, a LAN address, none) is refused
// unless an entry allows it, exactly or as a domain.
func TestAllowed(t *testing.T) {
	c, err := hostcheck.New([]string{"Idem.Example.org", ".corp.example", "10.0.0.5", "[fd00::1]"})
	if err != nil {
		t.Fatal(err)
	}
	none, err := hostcheck.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	for host, want := range map[string]bool{
		"localhost": true, "LOCALHOST:8081": true, "localhost.:8081": true, "app.localhost:3000": true,
		"127.0.0.1": true, "127.0.0.1:8081": true, "127.9.8.7:1": true, "[::1]:8081": true, "[::1]": true,
		"evil.example": false, "evil.example:8081": false, "": false, "localhost.evil.example": false,
		"127.0.0.1.evil.example": false, "192.168.1.10:8081": false, "[::2]:8081": false, "0.0.0.0:8081": false,
		"notlocalhost": false,
	} {
		if got := none.Allowed(host); got != want {
			t.Errorf("no list: Allowed(%q) = %v, want %v", host, got, want)
		}
	}
	for host, want := range map[string]bool{
		"idem.example.org:443": true, "IDEM.example.org": true, "corp.example": true, "a.b.corp.example:80": true,
		"10.0.0.5:8081": true, "[fd00::1]:8081": true, "evilcorp.example": false, "example.org": false,
		"evil.example": false, "localhost": true,
	} {
		if got := c.Allowed(host); got != want {
			t.Errorf("with a list: Allowed(%q) = %v, want %v", host, got, want)
		}
	}
}

// TestNewRefusesBadEntries: a port, a scheme, a path or a wildcard is an
// error, not an entry that silently never matches (or matches too much).
func TestNewRefusesBadEntries(t *testing.T) {
	for _, e := range []string{"example.org:8081", "https://example.org", "example.org/ui", "*.example.org", "*", "."} {
		if _, err := hostcheck.New([]string{e}); err == nil {
			t.Errorf("New(%q) accepted it", e)
		}
	}
}

// TestWrap: a refused request never reaches the handler.
func TestWrap(t *testing.T) {
	c, _ := hostcheck.New(nil)
	reached := 0
	h := c.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached++ }),
		func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusForbidden) })
	req := httptest.NewRequest(http.MethodGet, "http://evil.example/", nil)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusForbidden || reached != 0 {
		t.Errorf("evil.example: %d, handler reached %d times", rec.Code, reached)
	}
	req = httptest.NewRequest(http.MethodGet, "http://127.0.0.1:8081/", nil)
	h.ServeHTTP(httptest.NewRecorder(), req)
	if reached != 1 {
		t.Errorf("127.0.0.1: handler reached %d times, want 1", reached)
	}
}
