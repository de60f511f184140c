package client

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestWithTokenSendsBearer(t *testing.T) {
	t.Parallel()
	var got []string
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Header.Get("Authorization"))
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"call_id":"c_0000000000000001","status":"succeeded"}`))
	}))
	defer ts.Close()
	c := &Client{Base: ts.URL, HTTP: WithToken(nil, "s3cret")}
	if _, err := c.Get(t.Context(), "c_0000000000000001"); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != "Bearer s3cret" {
		t.Fatalf("Authorization sent = %q, want [Bearer s3cret]", got)
	}
	if WithToken(nil, "") != nil {
		t.Fatal("an empty token should leave the client as it is")
	}
}
