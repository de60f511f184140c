package main

import (
	"context"
	"fmt"
	"net/http/httptest"
	"testing"

	"github.com/idemctl/idemctl/internal/demomcp"
	"github.com/idemctl/idemctl/internal/mcpdoor"
	"github.com/idemctl/idemctl/internal/server"
	"github.com/idemctl/idemctl/internal/server/servertest"
	"github.com/idemctl/idemctl/internal/toolreg"
)

// TestMCPStdioUpstreamResult: idemctl mcp (the stdio door, talking to a
// server over the API) answers a tool imported from an upstream MCP
// server with the upstream's own CallToolResult, first time and replayed.
func TestMCPStdioUpstreamResult(t *testing.T) {
	demo := demomcp.New(false)
	ts := httptest.NewServer(demo.Handler())
	t.Cleanup(ts.Close)
	reg, err := toolreg.Parse([]byte(fmt.Sprintf("tools:\n  - {name: demo, kind: mcp, url: %q}\n", ts.URL+"/mcp")), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Close() })
	if err := reg.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	base := servertest.Start(t, servertest.Options{Config: server.Config{Tools: reg}}).URL
	cs := mcpStdio(t, base)
	args := map[string]any{"to": "ann", "amount": 5, mcpdoor.KeyArg: "stdio-up"}
	for i := range 2 {
		res, sc := stdioCall(t, cs, "demo_send_receipt", args)
		if res.IsError || sc["receipt_id"] != "r_1" || sc["replayed"] != false {
			t.Fatalf("answer %d: structuredContent %v; want the upstream's {receipt_id: r_1, replayed: false}", i+1, sc)
		}
		if i == 1 && res.Meta["io.idemctl/replayed"] != true {
			t.Errorf("second answer not marked replayed: %v", res.Meta)
		}
	}
	if n := len(demo.Ledger().Receipts); n != 1 {
		t.Errorf("%d receipts, want 1", n)
	}
}
