package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"strings"
	"time"

	"github.com/idemctl/idemctl/internal/hostcheck"
	"github.com/idemctl/idemctl/internal/store/backend"
)

// pprofPrefix starts the line serve prints when --pprof listens; scripts
// and tests read the real address (with port 0) from it.
const pprofPrefix = "idemctl pprof on "

// startPprof serves Go's runtime profiles (/debug/pprof/…) on addr, a
// loopback address (Validate checked it): profiles show code paths and
// memory, which must not reach the network. It is a server of its own, so
// the API's mux, auth and limits never see these routes. It stops when ctx
// ends; the returned function waits for that.
func startPprof(ctx context.Context, addr string, hosts *hostcheck.Checker, errOut io.Writer) (wait func(), err error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--pprof: cannot listen on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", redactedCmdline(os.Args))
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	// A CPU profile or trace runs for ?seconds=N (30 by default): the write
	// timeout leaves room for the longest a user would ask for.
	// The listener is loopback, so a rebound page could read the profiles
	// but for the Host check (internal/hostcheck).
	guarded := hosts.Wrap(mux, func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, hostcheck.Code+": "+hostcheck.Message(r.Host), http.StatusForbidden)
	})
	srv := &http.Server{Handler: guarded, ReadHeaderTimeout: 5 * time.Second, WriteTimeout: 5 * time.Minute}
	served, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(served)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintf(errOut, "idemctl: pprof server: %v\n", err)
		}
	}()
	// done closes once Shutdown has also closed the idle keep-alive
	// connections: Serve returns as soon as the listener closes, before.
	go func() {
		defer close(done)
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		<-served
	}()
	fmt.Fprintf(errOut, "%shttp://%s/debug/pprof/\n", pprofPrefix, ln.Addr())
	return func() { <-done }, nil
}

// redactedCmdline is pprof.Cmdline without the secrets: the command line
// holds --db, whose URL or DSN may carry a password that every other output
// hides (backend.Redact). Each argument is redacted, and the value of a
// "--flag=value" one on its own, so a DSN given either way is covered.
func redactedCmdline(args []string) http.HandlerFunc {
	shown := make([]string, len(args))
	for i, a := range args {
		if name, value, ok := strings.Cut(a, "="); ok && strings.HasPrefix(name, "-") {
			shown[i] = name + "=" + backend.Redact(value)
		} else {
			shown[i] = backend.Redact(a)
		}
	}
	body := strings.Join(shown, "\x00") // NUL-separated, as pprof.Cmdline writes it
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, body)
	}
}
