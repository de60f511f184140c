package server

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/logkey"
)

// syncBuffer is a bytes.Buffer safe for the server's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestDurationsLoggedAsText: in JSON logs every duration (the lease at
// start, a call's duration, the grace at shutdown) is a string such as
// "30s", never integer nanoseconds.
func TestDurationsLoggedAsText(t *testing.T) {
	t.Parallel()
	var out syncBuffer
	b := setup(t, func(c *Config) {
		// Debug: a call's own lines (with its duration) are debug lines.
		c.Logger = slog.New(slog.NewJSONHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug}))
		c.Lease = 30 * time.Second
	})
	c := b.post("k-log-durations", `{"tool":"charge","args":{"amount":1}}`).call(t)
	b.waitFinal(c.CallID)

	seen := map[string]any{}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		for _, k := range []string{logkey.Lease, logkey.Grace, logkey.Pause, logkey.Duration} {
			if v, ok := rec[k]; ok {
				seen[k] = v
				if _, isText := v.(string); !isText {
					t.Errorf("%s logged as %v (%T) in %s, want text", k, v, v, line)
				}
			}
		}
	}
	if seen[logkey.Lease] != "30s" {
		t.Errorf("lease logged as %v, want \"30s\"", seen[logkey.Lease])
	}
	if d, ok := seen[logkey.Duration].(string); !ok {
		t.Errorf("no call duration logged (got %v)", seen[logkey.Duration])
	} else if _, err := time.ParseDuration(d); err != nil {
		t.Errorf("duration %q: %v", d, err)
	}
}

// TestCallStepsNotLoggedAtInfo: an ordinary call's steps (created, claimed,
// succeeded) are debug lines, so at info a call that simply succeeds writes
// nothing (a line per call costs about a tenth of the accepted rate); at debug each
// step has its line.
func TestCallStepsNotLoggedAtInfo(t *testing.T) {
	t.Parallel()
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
		var out syncBuffer
		b := setup(t, func(c *Config) {
			c.Logger = slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: level}))
		})
		c := b.post("k-quiet", `{"tool":"charge","args":{"amount":1}}`).call(t)
		b.waitFinal(c.CallID)
		// The run logs after its commit: stop the server, which waits
		// for every run, before reading.
		if err := b.srv.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		var lines []string
		for _, line := range strings.Split(out.String(), "\n") {
			if strings.Contains(line, c.CallID) {
				lines = append(lines, line)
			}
		}
		if level == slog.LevelInfo && len(lines) != 0 {
			t.Errorf("at info, an ordinary call logged %d lines: %q", len(lines), lines)
		}
		if level == slog.LevelDebug {
			for _, msg := range []string{`msg="tool call created"`, `msg="claimed call"`, `msg="call succeeded"`} {
				if !strings.Contains(strings.Join(lines, "\n"), msg) {
					t.Errorf("at debug, no %s line for the call: %q", msg, lines)
				}
			}
		}
	}
}
