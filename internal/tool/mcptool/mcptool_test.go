package mcptool

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemctl/idemctl/internal/httptool"
	"github.com/idemctl/idemctl/internal/tool"
	"github.com/idemctl/idemctl/internal/wire"
)

// TestMain doubles as a stdio MCP server (this test binary started with
// MCPTOOL_TEST_SERVER=1): its tool pid answers its process id, crash
// exits in the middle of the call, and it writes its API_TOKEN to stderr
// on start, as a careless server might.
func TestMain(m *testing.M) {
	if os.Getenv("MCPTOOL_TEST_SERVER") == "1" {
		fmt.Fprintf(os.Stderr, "stdio server up, token %s\n", os.Getenv("API_TOKEN"))
		srv := mcp.NewServer(&mcp.Implementation{Name: "crashy"}, nil)
		mcp.AddTool(srv, &mcp.Tool{Name: "pid"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strconv.Itoa(os.Getpid())}}}, nil, nil
		})
		mcp.AddTool(srv, &mcp.Tool{Name: "crash"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			os.Exit(3)
			return nil, nil, nil
		})
		_ = srv.Run(context.Background(), &mcp.StdioTransport{})
		return
	}
	os.Exit(m.Run())
}

// syncBuffer is a log destination written from several goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestStdioServerCrashRestarted: a stdio server that exits mid-call
// fails the attempt with outcome_unknown (reset_after_send, retryable: the
// tools/call was sent, its answer never came); the next call
// starts it again. Its stderr goes to the log, with the secrets of its
// environment redacted.
func TestStdioServerCrashRestarted(t *testing.T) {
	var logBuf syncBuffer
	const secret = "s3cret-token-value"
	u, err := New(Config{Name: "crashy", Command: []string{os.Args[0], "-test.run=^$"},
		Env: []EnvVar{{Name: "MCPTOOL_TEST_SERVER", Value: httptool.NewSecret("1")},
			{Name: "API_TOKEN", Value: httptool.NewSecret(secret)}},
		Redact: []httptool.Secret{httptool.NewSecret(secret)},
		Log:    slog.New(slog.NewTextHandler(&logBuf, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = u.Close() })
	ctx := context.Background()
	pid := func(callID string) string {
		t.Helper()
		out, err := Runner{Up: u, Tool: "pid", Name: "crashy_pid"}.Run(ctx, tool.Invocation{CallID: callID, Attempt: 1})
		if err != nil || out.Err != nil {
			t.Fatalf("pid: %v %+v", err, out.Err)
		}
		return string(out.Result)
	}
	first := pid("c_1")
	out, err := Runner{Up: u, Tool: "crash", Name: "crashy_crash"}.Run(ctx, tool.Invocation{CallID: "c_2", Attempt: 1})
	if err != nil || out.Err == nil || out.Err.Code != wire.CodeOutcomeUnknown || out.Err.Unknown != wire.UnknownResetAfterSend ||
		!out.Err.Retryable || !strings.Contains(out.Err.Message, wire.CodeUpstreamUnreachable) {
		t.Fatalf("crash mid-call: %v %+v; want outcome_unknown reset_after_send (upstream_unreachable), retryable", err, out.Err)
	}
	second := pid("c_3")
	if first == second {
		t.Errorf("the same process answered before and after the crash: %s", first)
	}
	logs := logBuf.String()
	if !strings.Contains(logs, "stdio server up, token [redacted]") {
		t.Errorf("the server's stderr is not in the log, redacted:\n%s", logs)
	}
	if strings.Contains(logs, secret) {
		t.Errorf("the secret is in the log:\n%s", logs)
	}
}

// TestRetryableRPC: the JSON-RPC errors a retry may get past are
// retryable; the request's own faults are not.
func TestRetryableRPC(t *testing.T) {
	for code, want := range map[int64]bool{-32700: false, -32600: false, -32601: false, -32602: false,
		-32603: true, -32000: true, -32099: true, -31999: false, 1: false} {
		if got := retryableRPC(code); got != want {
			t.Errorf("retryableRPC(%d) = %v, want %v", code, got, want)
		}
	}
}
