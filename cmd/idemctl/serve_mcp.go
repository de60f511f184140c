package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/idemctl/idemctl/internal/toolreg"
)

// defaultMCPRefresh is how often the upstream MCP servers' tool lists are
// read again (serve --mcp-refresh).
const defaultMCPRefresh = time.Minute

// startUpstreams imports the tools of the tools file's mcp entries
// (docs/tools.md, "The mcp kind") before the server is built, then keeps
// the lists fresh every interval and on SIGHUP until stop is called, which
// also ends the connections and stops the stdio servers. An upstream that
// does not answer at start is logged and does not stop the server: its
// tools answer 503 upstream_unavailable until it does. A tool the registry
// cannot take (its name, its schema) stops the start, naming it.
func startUpstreams(ctx context.Context, reg *toolreg.Registry, log *slog.Logger, interval time.Duration) (stop func(), err error) {
	if reg == nil || len(reg.Upstreams()) == 0 {
		return func() {}, nil
	}
	reg.SetLog(log)
	refresh := func(ctx context.Context, why string) error {
		err := reg.Refresh(ctx)
		if err != nil {
			log.Warn("mcp upstreams: tool lists not all read", "why", why, "err", err)
		} else {
			log.Info("mcp upstreams: tool lists read", "why", why)
		}
		return err
	}
	if err := refresh(ctx, "start"); errors.Is(err, toolreg.ErrBadImport) {
		_ = reg.Close()
		return nil, fmt.Errorf("--tools: %w", err)
	}
	if interval <= 0 {
		interval = defaultMCPRefresh
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-rctx.Done():
				return
			case <-tick.C:
				_ = refresh(rctx, "interval")
			case <-hup:
				_ = refresh(rctx, "SIGHUP")
			}
		}
	})
	return func() {
		signal.Stop(hup)
		cancel()
		wg.Wait()
		_ = reg.Close()
	}, nil
}
