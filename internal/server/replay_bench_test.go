package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/sqlite"
	"github.com/idemctl/idemctl/internal/wire"
)

// benchServer is a server on a fresh SQLite file for benchmarks, with
// the handler called directly (no sockets), as in a same-key storm.
func benchServer(b *testing.B) *Server {
	b.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "idem.db"), store.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	srv, err := New(Config{Addr: "127.0.0.1:0", AllowedHosts: []string{"example.com"}}, st)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := srv.Start(ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		cancel()
		_ = srv.Shutdown(context.Background())
	})
	return srv
}

func benchPost(h http.Handler, key, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, wire.PathCalls, strings.NewReader(body))
	req.Header.Set(wire.HeaderIdempotencyKey, key)
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// BenchmarkReplaySucceeded is the same-key storm on the handler: every
// request repeats the key and body of a call that has succeeded.
func BenchmarkReplaySucceeded(b *testing.B) {
	srv := benchServer(b)
	h := srv.Handler()
	const body = `{"tool":"charge","args":{"amount":100}}`
	if rec := benchPost(h, "storm", body); rec.Code != http.StatusAccepted {
		b.Fatalf("first POST: %d %s", rec.Code, rec.Body)
	}
	deadline := time.Now().Add(10 * time.Second)
	for benchPost(h, "storm", body).Code != http.StatusOK {
		if time.Now().After(deadline) {
			b.Fatal("the call did not succeed")
		}
		time.Sleep(5 * time.Millisecond)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if rec := benchPost(h, "storm", body); rec.Code != http.StatusOK {
			b.Fatalf("replay: %d %s", rec.Code, rec.Body)
		}
	}
}

// BenchmarkParseCreate is the checking of a typical POST body: what every
// request pays before the store is asked anything.
func BenchmarkParseCreate(b *testing.B) {
	reg := Config{}
	reg.fill()
	body := []byte(`{"tool":"charge","args":{"amount":100},"client_id":"shop-1","seq":7}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, aerr := parseCreate(body, false, reg.Tools, store.DefaultPrincipal); aerr != nil {
			b.Fatal(aerr)
		}
	}
}

// BenchmarkCreateDistinct is the common request: a new key, answered 202
// after its commit, the call then run by the executor in the background.
// allocs/op and B/op count the whole process per request (handler, store,
// executor), as a server under load pays them.
func BenchmarkCreateDistinct(b *testing.B) {
	srv := benchServer(b)
	h := srv.Handler()
	const body = `{"tool":"charge","args":{"amount":100}}`
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		if rec := benchPost(h, "k"+strconv.Itoa(i), body); rec.Code != http.StatusAccepted {
			b.Fatalf("create: %d %s", rec.Code, rec.Body)
		}
	}
}
