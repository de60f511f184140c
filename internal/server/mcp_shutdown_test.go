package server

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemctl/idemctl/internal/executor"
	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/sqlite"
	"github.com/idemctl/idemctl/internal/wire"
)

// TestMCPSessionDoesNotHoldShutdown: an open MCP session (its standing
// GET stream) must not keep a graceful stop waiting for ShutdownGrace.
func TestMCPSessionDoesNotHoldShutdown(t *testing.T) {
	t.Parallel()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "idem.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	const grace = time.Minute
	srv, err := New(Config{Config: executor.Config{ShutdownGrace: grace}, Addr: "127.0.0.1:0", Logger: testLogger(t)}, st)
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
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "0"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{
		Endpoint: "http://" + ln.Addr().String() + wire.PathMCP, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if _, err := cs.ListTools(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(grace / 2):
		t.Fatalf("Run still stopping after %s: the MCP session holds the shutdown", time.Since(start))
	}
}
