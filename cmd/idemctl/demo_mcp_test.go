package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemctl/idemctl/internal/exitcode"
)

// TestDemoMCP: an MCP client calls send_receipt twice under one key:
// one receipt, or two with --ignore-keys; a non-loopback --listen is
// refused (exit 2) unless --allow-remote.
func TestDemoMCP(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	_, errOut, code := cliRunCtx(ctx, t, "demo-mcp", "--listen", "0.0.0.0:0")
	cancel()
	if code != exitcode.Usage || !strings.Contains(errOut, "--allow-remote") {
		t.Fatalf("non-loopback: exit %d, stderr %q", code, errOut)
	}
	for _, ignore := range []bool{false, true} {
		addr := freeAddr(t)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan int, 1)
		args := []string{"demo-mcp", "--listen", addr}
		if ignore {
			args = append(args, "--ignore-keys")
		}
		go func() {
			_, _, code := cliRunCtx(ctx, t, args...)
			done <- code
		}()
		getUntilUp(t, "http://"+addr+"/ledger")
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx,
			&mcp.StreamableClientTransport{Endpoint: "http://" + addr + "/mcp", MaxRetries: -1}, nil)
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "send_receipt",
				Arguments: map[string]any{"to": "ann", "amount": 5},
				Meta:      mcp.Meta{"io.idemctl/idempotency-key": "eff_1"}})
			if err != nil || res.IsError {
				t.Fatalf("send_receipt: %v %+v", err, res)
			}
		}
		_ = cs.Close()
		var ledger struct{ Receipts []any }
		if err := json.Unmarshal(getUntilUp(t, "http://"+addr+"/ledger"), &ledger); err != nil {
			t.Fatal(err)
		}
		cancel()
		if code := <-done; code != exitcode.OK {
			t.Fatalf("exit %d after cancel", code)
		}
		want := 1
		if ignore {
			want = 2
		}
		if len(ledger.Receipts) != want {
			t.Fatalf("ignore-keys=%v: %d receipts, want %d", ignore, len(ledger.Receipts), want)
		}
	}
}
