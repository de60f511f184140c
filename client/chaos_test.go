package client_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemctl/idemctl/client"
	"github.com/idemctl/idemctl/internal/chaos"
	"github.com/idemctl/idemctl/internal/server"
	"github.com/idemctl/idemctl/internal/server/servertest"
	"github.com/idemctl/idemctl/internal/wire"
)

// TestCallSurvivesADroppedAnswer: a proxy between the client and a real
// server lets the first POST through and drops the answer, after the
// server charged. Call retries with the same key and returns the one call,
// and the server holds one call and one effect: no second charge.
func TestCallSurvivesADroppedAnswer(t *testing.T) {
	base := servertest.Start(t, servertest.Options{Config: server.Config{}}).URL
	target, _ := url.Parse(base)
	proxy, err := chaos.New(chaos.Options{Target: target, Mode: chaos.ModeDropResponse,
		Select: chaos.First(1), DropHold: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ps := httptest.NewServer(proxy)
	t.Cleanup(ps.Close)

	var mu sync.Mutex
	var attempts []client.AttemptRecord
	c, err := client.New(ps.URL, client.WithAttemptTimeout(5*time.Second), client.WithPreferWait(time.Second),
		client.WithOnAttempt(func(a client.AttemptRecord) {
			mu.Lock()
			attempts = append(attempts, a)
			mu.Unlock()
		}))
	if err != nil {
		t.Fatal(err)
	}
	call, err := c.Call(t.Context(), "charge", map[string]any{"amount": 100})
	if err != nil || call.Status != client.StatusSucceeded {
		t.Fatalf("Call = %+v, %v; want the succeeded call", call.Call, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(attempts) != 2 || attempts[0].HTTP != 0 || attempts[1].HTTP != http.StatusOK || !attempts[1].Replayed ||
		attempts[0].Key != attempts[1].Key || attempts[0].Key != call.IdemKey {
		t.Fatalf("attempts = %+v; want a dropped answer, then the same key answered from the record", attempts)
	}
	if _, hits := proxy.Counts(); hits != 1 {
		t.Fatalf("the proxy dropped %d answers, want 1", hits)
	}
	direct, err := client.New(base)
	if err != nil {
		t.Fatal(err)
	}
	st, err := direct.Stats(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if st.Calls != 1 || st.Effects != 1 {
		t.Fatalf("server holds %d calls, %d effects; want 1 and 1", st.Calls, st.Effects)
	}
}

// countingTransport records every request as "METHOD path?query".
type countingTransport struct {
	mu    sync.Mutex
	paths []string
}

func (ct *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	ct.mu.Lock()
	ct.paths = append(ct.paths, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery)
	ct.mu.Unlock()
	return http.DefaultTransport.RoundTrip(r)
}

// lists counts the requests for a page of GET /v1/tool-calls.
func (ct *countingTransport) lists() int {
	ct.mu.Lock()
	defer ct.mu.Unlock()
	n := 0
	for _, p := range ct.paths {
		if strings.HasPrefix(p, http.MethodGet+" "+wire.PathCalls+"?") {
			n++
		}
	}
	return n
}

// TestListIteratesOverPages: List yields every call of the filter, newest
// first, fetching one keyset page after another; breaking out of the loop
// fetches no further page.
func TestListIteratesOverPages(t *testing.T) {
	base := servertest.Start(t, servertest.Options{Config: server.Config{}}).URL
	ct := &countingTransport{}
	c, err := client.New(base, client.WithHTTPClient(&http.Client{Transport: ct}))
	if err != nil {
		t.Fatal(err)
	}
	var made []string
	for i := range 5 {
		call, err := c.Call(t.Context(), "charge", map[string]any{"amount": i + 1})
		if err != nil {
			t.Fatal(err)
		}
		made = append(made, call.CallID)
	}
	if _, err := c.Call(t.Context(), "send_email", map[string]any{"to": "a@example.com"}); err != nil {
		t.Fatal(err)
	}
	slices.Reverse(made) // newest first

	var listed []string
	for call, err := range c.List(t.Context(), client.ListOptions{Tool: "charge", Limit: 2}) {
		if err != nil {
			t.Fatal(err)
		}
		listed = append(listed, call.CallID)
	}
	if !slices.Equal(listed, made) {
		t.Fatalf("listed %v, want %v", listed, made)
	}
	if n := ct.lists(); n != 3 {
		t.Fatalf("List fetched %d pages, want 3 (2+2+1)", n)
	}

	before := ct.lists()
	for range c.List(t.Context(), client.ListOptions{Tool: "charge", Limit: 2}) {
		break
	}
	if n := ct.lists() - before; n != 1 {
		t.Fatalf("a loop left after the first call fetched %d pages, want 1", n)
	}
}

// TestListEndsWithTheError: a failing page ends the iteration with its
// error as the last pair.
func TestListEndsWithTheError(t *testing.T) {
	base := servertest.Start(t, servertest.Options{Config: server.Config{}}).URL
	c, err := client.New(base)
	if err != nil {
		t.Fatal(err)
	}
	var errs []error
	n := 0
	for _, err := range c.List(t.Context(), client.ListOptions{Status: "nonsense"}) {
		n++
		errs = append(errs, err)
	}
	var apiErr *client.APIError
	if n != 1 || len(errs) != 1 || !errors.As(errs[0], &apiErr) || apiErr.Code != client.CodeBadRequest {
		t.Fatalf("List with a bad status yielded %d pairs %v, want one bad_request error", n, errs)
	}
}

// TestListFilters: KeyPrefix, Since and Until reach the server as its
// filters: a prefix keeps its keys' calls, a window after every call keeps
// none, and one before none of them keeps all.
func TestListFilters(t *testing.T) {
	base := servertest.Start(t, servertest.Options{Config: server.Config{}}).URL
	c, err := client.New(base)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"order-1", "order-2", "other-1"} {
		if _, err := c.Call(t.Context(), "charge", map[string]any{"amount": 1}, client.WithKey(key)); err != nil {
			t.Fatal(err)
		}
	}
	keys := func(o client.ListOptions) []string {
		var got []string
		for call, err := range c.List(t.Context(), o) {
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, call.IdemKey)
		}
		return got
	}
	if got := keys(client.ListOptions{KeyPrefix: "order-"}); !slices.Equal(got, []string{"order-2", "order-1"}) {
		t.Errorf("KeyPrefix order-: %v", got)
	}
	later := time.Now().Add(time.Hour)
	if got := keys(client.ListOptions{Since: later}); len(got) != 0 {
		t.Errorf("Since an hour from now: %v, want none", got)
	}
	if got := keys(client.ListOptions{Since: later.Add(-48 * time.Hour), Until: later}); len(got) != 3 {
		t.Errorf("a window around now: %v, want all 3", got)
	}
	if got := keys(client.ListOptions{Until: later.Add(-48 * time.Hour)}); len(got) != 0 {
		t.Errorf("Until yesterday: %v, want none", got)
	}
}
