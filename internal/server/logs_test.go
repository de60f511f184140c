package server

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
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
		for _, k := range []string{attrLease, attrGrace, attrPause, attrDuration} {
			if v, ok := rec[k]; ok {
				seen[k] = v
				if _, isText := v.(string); !isText {
					t.Errorf("%s logged as %v (%T) in %s, want text", k, v, v, line)
				}
			}
		}
	}
	if seen[attrLease] != "30s" {
		t.Errorf("lease logged as %v, want \"30s\"", seen[attrLease])
	}
	if d, ok := seen[attrDuration].(string); !ok {
		t.Errorf("no call duration logged (got %v)", seen[attrDuration])
	} else if _, err := time.ParseDuration(d); err != nil {
		t.Errorf("duration %q: %v", d, err)
	}
}
