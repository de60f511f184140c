package server

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/sqlite"
)

// TestIdleConnectionFloodIsBounded: a client opening many idle keep-alive
// connections to /healthz (no token needed) does not keep them all: past
// MaxConns the connection idle the longest is closed, and a real client
// still records a call.
func TestIdleConnectionFloodIsBounded(t *testing.T) {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "idem.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	srv, err := New(Config{Addr: "127.0.0.1:0", Logger: testLogger(t), MaxConns: 8, MaxIdlePerClient: -1}, st)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, ln) }()
	defer func() { cancel(); <-done }()
	addr := ln.Addr().String()

	var flood []net.Conn
	for i := range 30 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(waitDeadline))
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
			t.Fatalf("flood %d: %v", i, err)
		}
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("flood %d: %v", i, err)
		}
		res.Body.Close()
		flood = append(flood, c)
	}
	_ = flood[0].SetReadDeadline(time.Now().Add(2 * time.Second))
	_, err = flood[0].Read(make([]byte, 1))
	var ne net.Error
	if err == nil || (errors.As(err, &ne) && ne.Timeout()) {
		t.Fatalf("the oldest of 30 idle connections is still open with MaxConns 8 (read: %v)", err)
	}
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/tool-calls", strings.NewReader(`{"tool":"charge","args":{"amount":1}}`))
	req.Header.Set("Idempotency-Key", "after-the-flood")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("a client after the flood: %v", err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusAccepted {
		t.Fatalf("a client after the flood: %d, want 202", res.StatusCode)
	}
}
