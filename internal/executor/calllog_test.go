package executor

import (
	"bytes"
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/logkey"
	"github.com/idemctl/idemctl/internal/store"
)

// TestAttemptLoggerWritesWhatWithWrites: the attempt's logger defers its
// attributes' formatting, and every line it writes (directly, after With,
// after WithGroup, from two goroutines) reads exactly as through
// base.With of the same attributes, for the text and the JSON handler.
func TestAttemptLoggerWritesWhatWithWrites(t *testing.T) {
	c := store.Call{CallID: "c_0123", IdemKey: "order 7 \"x\"", Tool: "charge", Attempt: 3}
	fixed := func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Time(slog.TimeKey, time.Unix(0, 0).UTC())
		}
		return a
	}
	handlers := map[string]func(*bytes.Buffer) slog.Handler{
		"text": func(b *bytes.Buffer) slog.Handler {
			return slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelInfo, ReplaceAttr: fixed})
		},
		"json": func(b *bytes.Buffer) slog.Handler {
			return slog.NewJSONHandler(b, &slog.HandlerOptions{Level: slog.LevelInfo, ReplaceAttr: fixed})
		},
	}
	lines := func(log *slog.Logger) {
		log.Debug("off", "n", 1)
		log.Info("one", "n", 1)
		log.With("extra", true).Warn("two")
		log.WithGroup("g").Error("three", "n", 2)
		done := make(chan struct{})
		go func() { log.Info("four"); close(done) }()
		<-done
		log.Info("five", logkey.Err, "boom")
	}
	for name, h := range handlers {
		t.Run(name, func(t *testing.T) {
			var want, got bytes.Buffer
			base := slog.New(h(&want)).With("component", "executor")
			lines(base.With(logkey.CallID, c.CallID, logkey.Key, c.IdemKey, logkey.Tool, c.Tool, logkey.Attempt, c.Attempt))
			lines(attemptLogger(slog.New(h(&got)).With("component", "executor"), c))
			if got.String() != want.String() {
				t.Fatalf("attempt logger wrote\n%s\nbase.With wrote\n%s", got.String(), want.String())
			}
			if want.Len() == 0 || bytes.Contains(want.Bytes(), []byte("off")) {
				t.Fatalf("the lines are not what the test means to compare:\n%s", want.String())
			}
			if l := attemptLogger(slog.New(h(&got)), c); l.Enabled(context.Background(), slog.LevelDebug) ||
				!l.Enabled(context.Background(), slog.LevelInfo) {
				t.Fatal("the attempt logger's levels are not its base's")
			}
		})
	}
}
