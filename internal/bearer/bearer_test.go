package bearer

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestClientSendsBearer(t *testing.T) {
	t.Parallel()
	var got []string
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Header.Get("Authorization"))
	}))
	defer ts.Close()
	resp, err := Client(nil, "s3cret").Get(ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if len(got) != 1 || got[0] != "Bearer s3cret" {
		t.Fatalf("Authorization sent = %q, want [Bearer s3cret]", got)
	}
	if Client(nil, "") != nil {
		t.Fatal("an empty token should leave the client as it is")
	}
}
