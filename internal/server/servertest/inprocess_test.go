package servertest

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/server"
	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/sqlite"
	"github.com/idemctl/idemctl/internal/wire"
)

// post records a charge under key, with the Prefer header prefer if not
// empty, and returns the call the server answers with.
func post(t *testing.T, base, key, prefer string) wire.Call {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+wire.PathCalls,
		strings.NewReader(`{"tool":"charge","args":{"amount":1}}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(wire.HeaderIdempotencyKey, key)
	req.Header.Set("Content-Type", "application/json")
	if prefer != "" {
		req.Header.Set(wire.HeaderPrefer, prefer)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var c wire.Call
	if err := json.NewDecoder(res.Body).Decode(&c); err != nil || res.StatusCode/100 != 2 {
		t.Fatalf("POST %s: %d, %v", key, res.StatusCode, err)
	}
	return c
}

// TestStartRunsTheAPIAndExecutor: Start serves the real API with its
// configuration (NoUI: /ui is the API's 404) and runs its executor: a call
// becomes final.
func TestStartRunsTheAPIAndExecutor(t *testing.T) {
	t.Parallel()
	srv := Start(t, Options{Config: server.Config{NoUI: true}})
	if call := post(t, srv.URL, "k-start", "wait=5"); call.Status != wire.StatusSucceeded {
		t.Fatalf("call = %+v; want succeeded (the executor runs)", call)
	}
	res, err := http.Get(srv.URL + "/ui")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusNotFound {
		t.Errorf("GET /ui with NoUI: %d, want 404 (the Config was not used)", res.StatusCode)
	}
	if s, err := srv.Store.Stats(t.Context()); err != nil || s.Calls != 1 {
		t.Errorf("Store.Stats = %+v, %v; want the server's one call", s, err)
	}
}

// TestStartNoExecutorLeavesCallsPending: without the executor a call is
// recorded and stays pending.
func TestStartNoExecutorLeavesCallsPending(t *testing.T) {
	t.Parallel()
	srv := Start(t, Options{NoExecutor: true})
	call := post(t, srv.URL, "k-pending", "")
	if call.Status != wire.StatusPending {
		t.Fatalf("call = %+v; want pending", call)
	}
	time.Sleep(200 * time.Millisecond) // an executor would have claimed it by now
	got, err := srv.Store.GetAny(t.Context(), call.CallID)
	if err != nil || got.Status != store.StatusPending || got.Attempt != 0 {
		t.Fatalf("stored call = %+v, %v; want pending, never claimed", got, err)
	}
}

// TestStartClosesAGivenStore: the store a test hands to Start is the
// server's, and is closed when the test ends.
func TestStartClosesAGivenStore(t *testing.T) {
	t.Parallel()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "idem.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Run("server", func(t *testing.T) {
		if srv := Start(t, Options{Store: st}); srv.Store != st {
			t.Fatal("Start did not use the given store")
		}
	})
	if err := st.Ping(t.Context()); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Ping after the test = %v, want ErrUnavailable (closed)", err)
	}
}
