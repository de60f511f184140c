package bench

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestToolEffect: bench takes a tool's effect from the server's listing,
// falls back to the built-ins' table for a server without one, and refuses
// a tool the server does not list.
func TestToolEffect(t *testing.T) {
	t.Parallel()
	listing := `{"tools":[{"name":"charge","effect":true},{"name":"create_charge","effect":true},{"name":"lookup","effect":false}]}`
	for _, tc := range []struct {
		name, tool string
		status     int
		body       string
		want       bool
		err        string
	}{
		{"registry tool with effect", "create_charge", 200, listing, true, ""},
		{"registry tool without effect", "lookup", 200, listing, false, ""},
		{"older server: built-in table", "charge", 404, `{"error":{"code":"not_found"}}`, true, ""},
		{"older server: built-in without effect", "sleep", 404, `{}`, false, ""},
		{"unknown tool", "nope", 200, listing, false, `no tool "nope" (it has: charge, create_charge, lookup)`},
		{"server error", "charge", 500, `boom`, false, "HTTP 500"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/v1/tools" {
					http.NotFound(w, r)
					return
				}
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(tc.body))
			}))
			defer ts.Close()
			got, err := toolEffect(t.Context(), ts.Client(), ts.URL, tc.tool)
			switch {
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("err = %v, want one containing %q", err, tc.err)
			case tc.err == "" && err != nil:
				t.Fatalf("err = %v", err)
			case got != tc.want:
				t.Fatalf("effect = %v, want %v", got, tc.want)
			}
		})
	}
}
