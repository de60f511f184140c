package toolreg

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/tool"
)

// TestPrincipals: a tool with principals is called and seen by those
// principals only; a tool without is everyone's, and a registry without
// any restriction is the same for all.
func TestPrincipals(t *testing.T) {
	r, err := Parse([]byte(`
tools:
  - {name: refund, kind: http, url: "http://127.0.0.1:9/x", principals: [bob, alice, bob]}
  - {name: fail, kind: builtin, principals: [alice]}
`), env())
	if err != nil {
		t.Fatal(err)
	}
	refund, _ := r.Lookup("refund")
	if !slices.Equal(refund.Principals, []string{"alice", "bob"}) {
		t.Fatalf("principals %v, want sorted without repeats", refund.Principals)
	}
	for _, c := range []struct{ principal, names string }{
		{"alice", "charge,fail,refund,send_email,sleep"},
		{"bob", "charge,refund,send_email,sleep"},
		{"carol", "charge,send_email,sleep"},
		{"", "charge,send_email,sleep"},
	} {
		v := r.For(c.principal)
		if got := strings.Join(v.Names(), ","); got != c.names {
			t.Errorf("%q sees %s, want %s", c.principal, got, c.names)
		}
		for _, n := range r.Names() {
			tool, _ := r.Lookup(n)
			_, listed := v.Lookup(n)
			if tool.Allows(c.principal) != listed {
				t.Errorf("%q: %s allowed %v, listed %v", c.principal, n, tool.Allows(c.principal), listed)
			}
		}
		// The listing is the view's: a hidden tool is not named.
		js, _ := json.Marshal(v)
		if strings.Contains(c.names, "refund") != strings.Contains(string(js), `"refund"`) {
			t.Errorf("%q: listing %s", c.principal, js)
		}
		if strings.Contains(string(js), "principals") || strings.Contains(string(js), "bob") && c.principal != "bob" {
			t.Errorf("%q: listing names principals: %s", c.principal, js)
		}
	}
	if b := Builtins(); b.For("anyone") != b {
		t.Fatal("an unrestricted registry is not its own view")
	}
}

// TestEchoRedactedThroughFile: a tools file's ${VAR} header values are
// redacted from what the downstream answers, whole and the variable's
// value alone; a value written in the file is not a secret.
func TestEchoRedactedThroughFile(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprintf(w, `{"you_sent": %q, "token": %q, "plain": %q}`, r.Header.Get("Authorization"),
			strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "), r.Header.Get("X-Plain"))
	}))
	defer ts.Close()
	r := refundRegistry(t, ts.URL)
	out, err := r.Run(context.Background(), tool.Invocation{CallID: "c_00000000000000aa", Tool: "create_refund",
		Attempt: 1, Args: map[string]any{"amount": json.Number("5")}})
	if err != nil || out.Err == nil {
		t.Fatalf("got %v %+v", err, out)
	}
	want := `{"plain":"plain","token":"[redacted]","you_sent":"[redacted]"}`
	if string(out.Err.Body) != want {
		t.Fatalf("error body %s, want %s", out.Err.Body, want)
	}
}

// TestRetryAfterCappedByMaxBackoff: an http tool honours a downstream's
// Retry-After up to its retry.max_backoff.
func TestRetryAfterCappedByMaxBackoff(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "315360000") // ten years
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer ts.Close()
	r := refundRegistry(t, ts.URL) // max_backoff: 30s
	out, err := r.Run(context.Background(), tool.Invocation{CallID: "c_00000000000000aa", Tool: "create_refund",
		Attempt: 1, Args: map[string]any{"amount": json.Number("5")}})
	if err != nil || out.Err == nil || out.Err.RetryAfter != 30*time.Second {
		t.Fatalf("got %v %+v, want RetryAfter 30s", err, out.Err)
	}
}
