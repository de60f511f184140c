package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemctl/idemctl/internal/exitcode"
)

// benchFake answers every POST with 202 and /stats with 0/0 first, then with
// whatever after says: a stand-in for a broken service.
func benchFake(t *testing.T, after string) string {
	t.Helper()
	var statsCalls atomic.Int64
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/stats":
			if statsCalls.Add(1) == 1 {
				_, _ = w.Write([]byte(`{"calls":0,"effects":0,"by_status":{}}`))
				return
			}
			_, _ = w.Write([]byte(after))
		case "/v1/tool-calls":
			w.WriteHeader(http.StatusAccepted)
			_, _ = w.Write([]byte(`{"status":"pending"}`))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(ts.Close)
	return ts.URL
}

func TestBenchSameKeyTwoEffectsExitsOne(t *testing.T) {
	t.Parallel()
	base := benchFake(t, `{"calls":1,"effects":2,"by_status":{"succeeded":1}}`)
	out, errOut, code := cliRun(t, "bench", "--base", base, "-n", "20", "-c", "4", "--same-key", "--drain-timeout", "1s")
	if code != exitcode.Failed {
		t.Fatalf("exit %d, want 1\n%s\n%s", code, out, errOut)
	}
	if !strings.Contains(out, "FAIL same_key_at_most_one_effect") || !strings.Contains(errOut, "a check failed") {
		t.Errorf("stdout:\n%s\nstderr: %s", out, errOut)
	}
}

func TestBenchHealthyFakeExitsZero(t *testing.T) {
	t.Parallel()
	base := benchFake(t, `{"calls":1,"effects":1,"by_status":{"succeeded":1}}`)
	out, errOut, code := cliRun(t, "bench", "--base", base, "-n", "20", "-c", "4", "--same-key", "-o", "json")
	if code != exitcode.OK {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	var rep struct {
		OK         bool  `json:"ok"`
		CallsDelta int64 `json:"calls_delta"`
		N          int   `json:"n"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || !rep.OK || rep.CallsDelta != 1 || rep.N != 20 {
		t.Errorf("report %+v (%v):\n%s", rep, err, out)
	}
}

func TestBenchInProcess(t *testing.T) {
	t.Parallel()
	out, errOut, code := cliRun(t, "bench", "-n", "30", "-c", "5", "--workers", "2", "--ceiling", "-o", "json")
	if code != exitcode.OK {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	var rep struct {
		OK           bool           `json:"ok"`
		Server       string         `json:"server"`
		Workers      int            `json:"workers"`
		CallsDelta   int64          `json:"calls_delta"`
		EffectsDelta int64          `json:"effects_delta"`
		Status       map[string]int `json:"status"`
		Ceiling      *struct {
			Fraction float64 `json:"fraction"`
		} `json:"ceiling"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if !rep.OK || rep.Server != "in-process" || rep.Workers != 2 || rep.CallsDelta != 30 || rep.EffectsDelta != 30 ||
		rep.Status["202"] != 30 || rep.Ceiling == nil || rep.Ceiling.Fraction <= 0 {
		t.Errorf("report %+v", rep)
	}
	// Not a terminal: no progress bar on stderr (no carriage returns), only
	// the plain progress lines a slow run prints every few seconds.
	for _, line := range strings.Split(strings.TrimSuffix(errOut, "\n"), "\n") {
		if line != "" && (!strings.HasPrefix(line, "bench: ") || strings.Contains(line, "\r")) {
			t.Errorf("stderr %q, want nothing but plain progress lines", errOut)
			break
		}
	}
}

func TestBenchBadFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"bench", "-n", "0"},
		{"bench", "-c", "0"},
		{"bench", "--tool", "teleport"},
		{"bench", "--args", "{"},
		{"bench", "--base", "127.0.0.1:8081"},
		{"bench", "-o", "yaml"},
	} {
		if _, errOut, code := cliRun(t, args...); code != exitcode.Usage || errOut == "" {
			t.Errorf("%q: exit %d, stderr %q; want 2 and a message", args, code, errOut)
		}
	}
}

func TestInspectUnknownSubcommand(t *testing.T) {
	t.Parallel()
	if _, errOut, code := cliRun(t, "inspect", "cals"); code == exitcode.OK || !strings.Contains(errOut, "unknown command") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}
