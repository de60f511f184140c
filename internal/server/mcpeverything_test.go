package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemctl/idemctl/internal/mcpdoor"
	"github.com/idemctl/idemctl/internal/toolreg"
	"github.com/idemctl/idemctl/internal/wire"
)

// everythingEnv names the mcp-server-everything program of the official
// reference server (@modelcontextprotocol/server-everything), which
// .ci/run installs from npm and exports.
const everythingEnv = "IDEMCTL_TEST_MCP_EVERYTHING"

func everythingBin(t *testing.T) string {
	t.Helper()
	bin := os.Getenv(everythingEnv)
	if bin == "" {
		t.Skip(everythingEnv + " is not set: the tests against the MCP reference server " +
			"(@modelcontextprotocol/server-everything) need its mcp-server-everything program; .ci/run installs it and sets the variable")
	}
	return bin
}

// startEverythingHTTP runs the reference server over streamable HTTP on a
// free loopback port and returns its endpoint.
func startEverythingHTTP(t *testing.T, bin string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command(bin, "streamableHttp")
	cmd.Env = append(os.Environ(), fmt.Sprintf("PORT=%d", port))
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the reference server does not listen on %s", addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return "http://" + addr + "/mcp"
}

// TestMCPUpstreamEverything imports every tool of the reference server,
// over stdio and over streamable HTTP, and calls echo and get-sum through
// the API and through the door, get-tiny-image and get-structured-content
// through the door: the same key again replays the identical result, and
// the door's answer is the upstream's own.
func TestMCPUpstreamEverything(t *testing.T) {
	bin := everythingBin(t)
	for _, transport := range []string{"stdio", "http"} {
		t.Run(transport, func(t *testing.T) {
			var entry string
			var direct mcp.Transport
			if transport == "stdio" {
				entry = fmt.Sprintf("command: [%q, stdio]", bin)
				direct = &mcp.CommandTransport{Command: exec.Command(bin, "stdio")}
			} else {
				url := startEverythingHTTP(t, bin)
				entry = fmt.Sprintf("url: %q", url)
				direct = &mcp.StreamableClientTransport{Endpoint: url, MaxRetries: -1}
			}
			reg, err := toolreg.Parse([]byte("tools:\n  - {name: ev, kind: mcp, timeout: 20s, "+entry+"}\n"), nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = reg.Close() })
			if err := reg.Refresh(context.Background()); err != nil {
				t.Fatalf("Refresh: %v", err)
			}
			b := setup(t, func(c *Config) { c.Tools = reg })

			up, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(context.Background(), direct, nil)
			if err != nil {
				t.Fatalf("connecting to the reference server: %v", err)
			}
			t.Cleanup(func() { _ = up.Close() })
			upList, err := up.ListTools(context.Background(), nil)
			if err != nil || len(upList.Tools) < 10 {
				t.Fatalf("the reference server lists %d tools (%v)", len(upList.Tools), err)
			}
			for _, ut := range upList.Tools {
				it, ok := reg.Lookup("ev_" + ut.Name)
				if !ok {
					t.Errorf("upstream tool %s not imported as ev_%s", ut.Name, ut.Name)
					continue
				}
				if it.Description != ut.Description {
					t.Errorf("ev_%s: description %q, upstream's %q", ut.Name, it.Description, ut.Description)
				}
			}

			// Through the API: the result is the CallToolResult; the same
			// key again replays the identical bytes.
			for _, tc := range []struct{ tool, args, want string }{
				{"ev_echo", `{"message":"hello"}`, "Echo: hello"},
				{"ev_get-sum", `{"a":2,"b":3}`, "5"},
			} {
				body := `{"tool":"` + tc.tool + `","args":` + tc.args + `}`
				c := b.waitFinal(b.post("k-api-"+tc.tool, body).call(t).CallID)
				var res mcp.CallToolResult
				if c.Status != wire.StatusSucceeded || json.Unmarshal(c.Result, &res) != nil || len(res.Content) == 0 {
					t.Fatalf("%s: %s %s %s", tc.tool, c.Status, c.Result, c.Error)
				}
				if txt, _ := res.Content[0].(*mcp.TextContent); txt == nil || !strings.Contains(txt.Text, tc.want) {
					t.Errorf("%s: result %s, want text with %q", tc.tool, c.Result, tc.want)
				}
				again := b.post("k-api-"+tc.tool, body)
				if again.status != http.StatusOK || string(again.call(t).Result) != string(c.Result) {
					t.Errorf("%s replay: %d %s; want 200 and %s", tc.tool, again.status, again.body, c.Result)
				}
			}

			// Through the door, compared with the upstream's own answer.
			cs := mustMCP(t, b, "")
			for _, tc := range []struct {
				tool string
				args map[string]any
			}{
				{"echo", map[string]any{"message": "door"}},
				{"get-sum", map[string]any{"a": 20, "b": 22}},
				{"get-tiny-image", map[string]any{}},
				{"get-structured-content", map[string]any{"location": "Chicago"}},
			} {
				want, err := up.CallTool(context.Background(), &mcp.CallToolParams{Name: tc.tool, Arguments: tc.args})
				if err != nil {
					t.Fatalf("%s upstream: %v", tc.tool, err)
				}
				meta := map[string]any{mcpdoor.MetaKey: "k-door-" + tc.tool}
				first := callTool(t, cs, "ev_"+tc.tool, tc.args, meta)
				second := callTool(t, cs, "ev_"+tc.tool, tc.args, meta)
				for i, got := range []*mcp.CallToolResult{first, second} {
					if !sameResult(t, got, want) {
						g, _ := json.Marshal(got)
						w, _ := json.Marshal(want)
						t.Errorf("%s through the door (answer %d):\n got %s\nwant %s", tc.tool, i+1, g, w)
					}
				}
				if second.Meta["io.idemctl/replayed"] != true {
					t.Errorf("%s: second answer not marked replayed: %v", tc.tool, second.Meta)
				}
			}
		})
	}
}

// sameResult compares two CallToolResults but for idemctl's _meta keys.
func sameResult(t *testing.T, got, want *mcp.CallToolResult) bool {
	t.Helper()
	strip := func(r *mcp.CallToolResult) map[string]any {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		if meta, ok := m["_meta"].(map[string]any); ok {
			for k := range meta {
				if strings.HasPrefix(k, "io.idemctl/") {
					delete(meta, k)
				}
			}
			if len(meta) == 0 {
				delete(m, "_meta")
			}
		}
		return m
	}
	return reflect.DeepEqual(strip(got), strip(want))
}
