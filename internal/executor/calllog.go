package executor

import (
	"context"
	"log/slog"
	"sync"

	"github.com/idemctl/idemctl/internal/logkey"
	"github.com/idemctl/idemctl/internal/store"
)

// attemptLogger is base with the attempt's attributes (call id, key, tool,
// attempt), as base.With would give it. A handler's WithAttrs formats
// and copies its attributes at once, and most attempts of a fast tool
// log nothing at the levels a server runs at: deferredAttrs does that
// work at the attempt's first line instead, which then reads exactly as
// base.With's would.
func attemptLogger(base *slog.Logger, c store.Call) *slog.Logger {
	d := &deferredAttrs{base: base.Handler()}
	d.attrs = [...]slog.Attr{slog.String(logkey.CallID, c.CallID), slog.String(logkey.Key, c.IdemKey),
		slog.String(logkey.Tool, c.Tool), slog.Int64(logkey.Attempt, c.Attempt)}
	return slog.New(d)
}

// deferredAttrs is base.WithAttrs(attrs), computed when first needed.
type deferredAttrs struct {
	base  slog.Handler
	attrs [4]slog.Attr
	once  sync.Once
	with  slog.Handler
}

func (d *deferredAttrs) handler() slog.Handler {
	d.once.Do(func() { d.with = d.base.WithAttrs(d.attrs[:]) })
	return d.with
}

// Enabled asks base: the handlers a server logs through (slog's text and
// JSON handlers) decide by level alone, whatever their attributes.
func (d *deferredAttrs) Enabled(ctx context.Context, l slog.Level) bool {
	return d.base.Enabled(ctx, l)
}

func (d *deferredAttrs) Handle(ctx context.Context, r slog.Record) error {
	return d.handler().Handle(ctx, r)
}

func (d *deferredAttrs) WithAttrs(as []slog.Attr) slog.Handler { return d.handler().WithAttrs(as) }

func (d *deferredAttrs) WithGroup(name string) slog.Handler { return d.handler().WithGroup(name) }
