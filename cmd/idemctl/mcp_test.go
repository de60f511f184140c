package main

import (
	"context"
	"encoding/json"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemctl/idemctl/client"
	"github.com/idemctl/idemctl/internal/exitcode"
	"github.com/idemctl/idemctl/internal/mcpdoor"
	"github.com/idemctl/idemctl/internal/server/servertest"
)

// mcpStdio starts the built binary's "idemctl mcp" against base and
// connects the SDK's client to its stdio.
func mcpStdio(t *testing.T, base string, extra ...string) *mcp.ClientSession {
	t.Helper()
	bin := servertest.Binary(t)
	cmd := exec.Command(bin, append([]string{"mcp", "--base", base}, extra...)...)
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "0"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connecting to idemctl mcp: %v", err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

func stdioCall(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any) (*mcp.CallToolResult, map[string]any) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("tools/call %s: %v", tool, err)
	}
	raw, _ := json.Marshal(res.StructuredContent)
	var m map[string]any
	_ = json.Unmarshal(raw, &m)
	return res, m
}

func TestMCPStdio(t *testing.T) {
	t.Parallel()
	base := pollRealServer(t)
	cs := mustTools(t, mcpStdio(t, base, "--wait", "1ms"))

	// Same key twice: one call, one effect, the second a replay.
	args := map[string]any{"amount": 3, mcpdoor.KeyArg: "stdio-k"}
	r1, _ := stdioCall(t, cs, "charge", args)
	r2, _ := stdioCall(t, cs, "charge", args)
	if r1.IsError || r2.IsError || r1.Meta["io.idemctl/call-id"] != r2.Meta["io.idemctl/call-id"] {
		t.Fatalf("same key twice: %+v / %+v", r1.Meta, r2.Meta)
	}
	if r2.Meta["io.idemctl/replayed"] != true {
		t.Fatalf("second call not a replay: %+v", r2.Meta)
	}
	st, err := mustClient(t, base).Stats(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if st.Calls != 1 || st.Effects != 1 {
		t.Fatalf("calls=%d effects=%d, want 1 and 1", st.Calls, st.Effects)
	}

	// Same key, other args: the conflict type, with the call the key names.
	r, body := stdioCall(t, cs, "charge", map[string]any{"amount": 4, mcpdoor.KeyArg: "stdio-k"})
	if !r.IsError || body["type"] != mcpdoor.TypeConflict || body["call_id"] != r1.Meta["io.idemctl/call-id"] {
		t.Fatalf("conflict: %v", body)
	}

	// No key on a tool with effects: refused, nothing recorded.
	r, body = stdioCall(t, cs, "charge", map[string]any{"amount": 5})
	if !r.IsError || body["type"] != mcpdoor.TypeKeyRequired {
		t.Fatalf("key-less charge: %v", body)
	}

	// A slow tool: still running, then a replay with the result.
	r, body = stdioCall(t, cs, "sleep", map[string]any{"seconds": 2, mcpdoor.KeyArg: "stdio-slow"})
	if r.IsError || body["type"] != mcpdoor.TypeRunning {
		t.Fatalf("slow call: %v", body)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		r, body = stdioCall(t, cs, "sleep", map[string]any{"seconds": 2, mcpdoor.KeyArg: "stdio-slow"})
		if r.Meta["io.idemctl/replayed"] != true {
			t.Fatalf("retry not a replay: %+v", r.Meta)
		}
		if r.Meta["io.idemctl/status"] == "succeeded" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("slow call never final: %v", body)
		}
	}
	if st, _ := mustClient(t, base).Stats(t.Context()); st.Calls != 2 {
		t.Fatalf("calls = %d, want 2 (charge, sleep)", st.Calls)
	}

	// The helper tools read through the API.
	r, body = stdioCall(t, cs, mcpdoor.GetCallTool, map[string]any{"key": "stdio-k"})
	if r.IsError || body["call_id"] != r1.Meta["io.idemctl/call-id"] {
		t.Fatalf("get call by key: %v", body)
	}
}

// mustTools checks the stdio server lists the server's tools with the key
// argument, and returns the session.
func mustTools(t *testing.T, cs *mcp.ClientSession) *mcp.ClientSession {
	t.Helper()
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
		if tool.Name == "charge" {
			raw, _ := json.Marshal(tool.InputSchema)
			var s struct {
				Properties map[string]any `json:"properties"`
			}
			_ = json.Unmarshal(raw, &s)
			if s.Properties["amount"] == nil || s.Properties[mcpdoor.KeyArg] == nil {
				t.Fatalf("charge schema over stdio: %s", raw)
			}
		}
	}
	slices.Sort(names)
	want := []string{"charge", "fail", mcpdoor.GetCallTool, mcpdoor.ListCallsTool, "send_email", "sleep"}
	if !slices.Equal(names, want) {
		t.Fatalf("tools = %v, want %v", names, want)
	}
	return cs
}

func TestMCPFlagsValidated(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"mcp", "--base", "ftp://x"},
		{"mcp", "--wait", "0s"},
	} {
		_, _, code := cliRun(t, args...)
		if code != exitcode.Usage {
			t.Fatalf("%v: exit %d, want %d", args, code, exitcode.Usage)
		}
	}
}

// mustClient is a client of base, which the test's server built.
func mustClient(t *testing.T, base string) *client.Client {
	t.Helper()
	c, err := client.New(base)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
