package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/idemctl/idemctl/client"
	"github.com/idemctl/idemctl/internal/exitcode"
	"github.com/idemctl/idemctl/internal/server"
	"github.com/idemctl/idemctl/internal/server/servertest"
	"github.com/idemctl/idemctl/internal/tool/builtin"
	"github.com/idemctl/idemctl/internal/wire"
)

// TestRedriveCommand: idemctl redrive --dry-run lists the retryable
// failure and changes nothing; without it the call goes back to pending
// and runs again (a fail tool with times 1 then succeeds at attempt 2);
// --force adds the definite failure; a bad answer exits 1 with its code.
func TestRedriveCommand(t *testing.T) {
	base := servertest.Start(t, servertest.Options{Config: server.Config{}}).URL
	c, err := client.New(base, client.WithPreferWait(0))
	if err != nil {
		t.Fatal(err)
	}
	call := func(key string, retryable bool) string {
		res, _ := c.Submit(t.Context(), builtin.Fail, map[string]any{"times": 1, "retryable": retryable}, client.WithKey(key))
		if res.Call.CallID == "" {
			t.Fatalf("%s: no call recorded", key)
		}
		waitCall(t, c, res.Call.CallID, wire.StatusFailed, 1)
		return res.Call.CallID
	}
	retry, definite := call("r", true), call("d", false)
	if retry == "" || definite == "" {
		t.Fatal("setup: no call ids")
	}

	selected := func(args ...string) (ids []string, more bool) {
		t.Helper()
		out, errOut, code := cliRun(t, append([]string{"redrive", "--base", base}, args...)...)
		if code != exitcode.OK {
			t.Fatalf("redrive %v: exit %d\n%s%s", args, code, out, errOut)
		}
		var got struct {
			Calls []wire.Call `json:"calls"`
			More  bool        `json:"more"`
		}
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("redrive %v printed %q: %v", args, out, err)
		}
		for _, c := range got.Calls {
			ids = append(ids, c.CallID)
		}
		return ids, got.More
	}
	if ids, _ := selected("--dry-run", "--since", "1h"); len(ids) != 1 || ids[0] != retry {
		t.Fatalf("--dry-run selected %v, want [%s]", ids, retry)
	}
	if ids, _ := selected("--dry-run", "--until", "1h"); len(ids) != 0 {
		t.Fatalf("--until 1h ago selected %v, want none", ids)
	}
	if ids, _ := selected("--dry-run", "--force", "--tool", "fail"); len(ids) != 2 {
		t.Fatalf("--dry-run --force selected %v, want both", ids)
	}
	if got, err := c.Get(t.Context(), retry); err != nil || got.Status != wire.StatusFailed {
		t.Fatalf("after dry runs: %s, %v; want failed", got.Status, err)
	}
	if ids, more := selected("--code", "tool_failed", "--limit", "1"); len(ids) != 1 || ids[0] != retry || more {
		t.Fatalf("redrive selected %v (more %v), want [%s]", ids, more, retry)
	}
	waitCall(t, c, retry, wire.StatusSucceeded, 2)

	_, errOut, code := cliRun(t, "redrive", "--base", base, "--since", "yesterday")
	if code != exitcode.Usage || !strings.Contains(errOut, "--since") {
		t.Fatalf("--since yesterday: exit %d, %s; want a usage error", code, errOut)
	}
}

// waitCall polls the call until it has status at attempt.
func waitCall(t *testing.T, c *client.Client, id string, status wire.Status, attempt int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := c.Get(t.Context(), id)
		if err == nil && got.Status == status && got.Attempt == attempt {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("call %s: %s at attempt %d, %v; want %s at attempt %d", id, got.Status, got.Attempt, err, status, attempt)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
