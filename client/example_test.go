package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"time"

	"github.com/idemctl/idemctl/client"
	"github.com/idemctl/idemctl/internal/server"
	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/sqlite"
)

// startServer runs a real idemctl server in process, on a temporary SQLite
// database, so that the examples run; a program of yours would point the
// client at `idemctl serve` instead (http://127.0.0.1:8081 by default).
func startServer() (base string, stop func()) {
	dir, err := os.MkdirTemp("", "idemctl-example-")
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	st, err := sqlite.Open(ctx, filepath.Join(dir, "idem.db"), store.Options{})
	if err != nil {
		log.Fatal(err)
	}
	srv, err := server.New(server.Config{Addr: "127.0.0.1:0"}, st)
	if err != nil {
		log.Fatal(err)
	}
	if err := srv.Start(ctx); err != nil {
		log.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	return ts.URL, func() {
		ts.Close()
		cancel()
		_ = srv.Shutdown(context.Background())
		_ = st.Close()
		_ = os.RemoveAll(dir)
	}
}

// Call makes one tool call and returns it once it is final. The key is
// chosen once; should the program crash before it sees the answer, calling
// again with the same key returns the same call instead of charging twice.
func ExampleClient_Call() {
	base, stop := startServer()
	defer stop()
	ctx := context.Background()

	c, err := client.New(base)
	if err != nil {
		log.Fatal(err)
	}
	key := "order-4711-charge" // or client.NewKey(), stored with the order
	call, err := c.Call(ctx, "charge", map[string]any{"amount": 100}, client.WithKey(key))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(call.Status, call.IdemKey, string(call.Result) != "null")

	again, err := c.Call(ctx, "charge", map[string]any{"amount": 100}, client.WithKey(key))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("same call:", again.CallID == call.CallID)
	// Output:
	// succeeded order-4711-charge true
	// same call: true
}

// A call that ends failed is a *CallError: its code, and whether a request
// with the same key may run it again.
func ExampleCallError() {
	base, stop := startServer()
	defer stop()

	c, err := client.New(base)
	if err != nil {
		log.Fatal(err)
	}
	_, err = c.Call(context.Background(), "fail", map[string]any{"retryable": false, "message": "card declined"})
	var failed *client.CallError
	if errors.As(err, &failed) {
		fmt.Println(failed.Code, failed.Message, "retryable:", failed.Retryable)
	}
	// Output:
	// tool_failed card declined retryable: false
}

// The same key with different arguments is refused: the key belongs to
// the first request.
func ExampleErrConflict() {
	base, stop := startServer()
	defer stop()
	ctx := context.Background()

	c, err := client.New(base)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := c.Call(ctx, "charge", map[string]any{"amount": 100}, client.WithKey("k1")); err != nil {
		log.Fatal(err)
	}
	_, err = c.Call(ctx, "charge", map[string]any{"amount": 999}, client.WithKey("k1"))
	fmt.Println(errors.Is(err, client.ErrConflict))
	var apiErr *client.APIError
	if errors.As(err, &apiErr) {
		fmt.Println(apiErr.Status, apiErr.Code)
	}
	// Output:
	// true
	// 409 idempotency_conflict
}

// Submit and Wait are Call's two steps, for a program that records the
// call id before it waits.
func ExampleClient_Submit() {
	base, stop := startServer()
	defer stop()
	ctx := context.Background()

	c, err := client.New(base)
	if err != nil {
		log.Fatal(err)
	}
	sub, err := c.Submit(ctx, "sleep", map[string]any{"seconds": 0.1}, client.WithCallPreferWait(0))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("answered:", sub.HTTP, "final:", sub.Call.Final())
	call, err := c.Wait(ctx, sub.Call.CallID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(call.Status)
	// Output:
	// answered: 202 final: false
	// succeeded
}

// List walks every page of the caller's calls, newest first.
func ExampleClient_List() {
	base, stop := startServer()
	defer stop()
	ctx := context.Background()

	c, err := client.New(base)
	if err != nil {
		log.Fatal(err)
	}
	for _, amount := range []int{1, 2, 3} {
		if _, err := c.Call(ctx, "charge", map[string]any{"amount": amount}); err != nil {
			log.Fatal(err)
		}
	}
	for call, err := range c.List(ctx, client.ListOptions{Tool: "charge", Limit: 2}) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(call.Tool, string(call.Args), call.Status)
	}
	// Output:
	// charge {"amount":3} succeeded
	// charge {"amount":2} succeeded
	// charge {"amount":1} succeeded
}

// A client for a server run with auth tokens, with its own limits.
func ExampleNew() {
	c, err := client.New("http://127.0.0.1:8081",
		client.WithToken(os.Getenv("IDEMCTL_TOKEN")),
		client.WithRetries(5),
		client.WithWaitTimeout(time.Minute))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(c.Base())
	// Output:
	// http://127.0.0.1:8081
}
