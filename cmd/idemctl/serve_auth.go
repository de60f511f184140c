package main

import (
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/idemctl/idemctl/internal/server"
)

// reloadOnSIGHUP re-reads the token file on every SIGHUP until the returned
// stop is called. A file that fails to load is logged and the tokens in
// force stay (server.Auth.Reload): a typo must not lock every client out.
func reloadOnSIGHUP(auth *server.Auth, log *slog.Logger) (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-hup:
				if err := auth.Reload(); err != nil {
					log.Error("auth tokens not reloaded; the previous tokens stay in force", "file", auth.Path(), "err", err)
					continue
				}
				log.Info("auth tokens reloaded", "file", auth.Path(), "tokens", auth.Len())
			case <-done:
				return
			}
		}
	}()
	return func() {
		signal.Stop(hup)
		close(done)
	}
}

// retentionText is the retention for the start line: "24h0m0s", or
// "forever" for 0.
func retentionText(d time.Duration) string {
	if d == 0 {
		return "forever"
	}
	return d.String()
}
