package mcpdoor

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemctl/idemctl/internal/wire"
)

// fakeCaller answers Submit with a fixed call or error.
type fakeCaller struct {
	tools []ToolInfo
	call  Call
	err   error
}

func (f fakeCaller) Tools(context.Context) ([]ToolInfo, error) { return f.tools, nil }
func (f fakeCaller) Submit(context.Context, string, string, string, json.RawMessage, time.Duration) (Call, bool, error) {
	return f.call, false, f.err
}
func (f fakeCaller) Get(context.Context, string, string) (Call, error)      { return f.call, f.err }
func (f fakeCaller) GetByKey(context.Context, string, string) (Call, error) { return f.call, f.err }
func (f fakeCaller) List(context.Context, string, string, int) ([]Call, error) {
	return []Call{f.call}, f.err
}

var echoTool = ToolInfo{Name: "echo", Schema: json.RawMessage(`true`)}

func session(t *testing.T, c Caller) *mcp.ClientSession {
	t.Helper()
	srv, err := New(context.Background(), c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	st, ct := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(context.Background(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "0"}, nil).Connect(context.Background(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

func call(t *testing.T, cs *mcp.ClientSession) (*mcp.CallToolResult, map[string]any) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{KeyArg: "k"}})
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(res.StructuredContent)
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("structuredContent %s is no object: %v", raw, err)
	}
	return res, m
}

func TestNonObjectResultIsWrapped(t *testing.T) {
	cs := session(t, fakeCaller{tools: []ToolInfo{echoTool},
		call: Call{Call: wire.Call{CallID: "c_1", IdemKey: "k", Status: wire.StatusSucceeded, Result: json.RawMessage(`[1,2]`)}}})
	res, m := call(t, cs)
	if res.IsError || !jsonIs(m["result"], `[1,2]`) {
		t.Fatalf("result %v, want {\"result\": [1,2]}", m)
	}
}

func TestCallerFailureIsRetryableToolError(t *testing.T) {
	cs := session(t, fakeCaller{tools: []ToolInfo{echoTool}, err: errors.New("dial tcp: connection refused")})
	res, m := call(t, cs)
	if !res.IsError || m["type"] != "unavailable" || m["idempotency_key"] != "k" {
		t.Fatalf("transport failure: %v", m)
	}
}

func TestHelperNameCollisionRefused(t *testing.T) {
	_, err := New(context.Background(), fakeCaller{tools: []ToolInfo{{Name: GetCallTool, Schema: json.RawMessage(`true`)}}}, Options{})
	if err == nil {
		t.Fatal("a registry tool named like a helper tool was accepted")
	}
}

func jsonIs(v any, want string) bool {
	b, _ := json.Marshal(v)
	return string(b) == want
}
