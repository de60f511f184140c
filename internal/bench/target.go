package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/idemctl/idemctl/internal/executor"
	"github.com/idemctl/idemctl/internal/server"
	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/sqlite"
)

// newHTTPServer is the http.Server both the in-process service and the
// bare ceiling handler are served by, so the ceiling differs from the
// service only in its handler. The timeouts are those `idemctl serve` uses.
func newHTTPServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      server.DefaultMaxWait + 15*time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(slog.DiscardHandler, slog.LevelWarn),
	}
}

// listener serves h on 127.0.0.1:0 and returns its base URL and a stop
// function that closes the listener and its connections.
type listener struct {
	base string
	hs   *http.Server
	done chan error
}

// serve starts h on a fresh loopback port.
func serve(h http.Handler) (*listener, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listening on 127.0.0.1:0: %w", err)
	}
	l := &listener{base: "http://" + ln.Addr().String(), hs: newHTTPServer(h), done: make(chan error, 1)}
	go func() { l.done <- l.hs.Serve(ln) }()
	return l, nil
}

// stop shuts the HTTP server down, waiting for in-flight requests up to ctx.
func (l *listener) stop(ctx context.Context) error {
	err := l.hs.Shutdown(ctx)
	if err != nil {
		_ = l.hs.Close() // out of time: cut what is left
	}
	if serveErr := <-l.done; !errors.Is(serveErr, http.ErrServerClosed) {
		err = errors.Join(err, serveErr)
	}
	return err
}

// inProcess is a server the bench started itself, on a temporary SQLite
// database that is removed when it stops.
type inProcess struct {
	dir string
	st  store.Store
	srv *server.Server
	l   *listener
}

// startInProcess opens a fresh SQLite database in a temporary directory,
// starts the service's executor with workers and lease, and serves its
// handler on 127.0.0.1:0.
func startInProcess(ctx context.Context, workers int, lease time.Duration) (_ *inProcess, err error) {
	dir, err := os.MkdirTemp("", "idemctl-bench-")
	if err != nil {
		return nil, fmt.Errorf("temp dir: %w", err)
	}
	p := &inProcess{dir: dir}
	defer func() {
		if err != nil {
			err = errors.Join(err, p.stop(context.WithoutCancel(ctx)))
		}
	}()
	if p.st, err = sqlite.Open(ctx, filepath.Join(dir, "idem.db"), store.Options{}); err != nil {
		return p, fmt.Errorf("opening temp database: %w", err)
	}
	p.srv, err = server.New(server.Config{
		Config: executor.Config{Workers: workers, Lease: lease},
		Addr:   "127.0.0.1:0",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}, p.st)
	if err != nil {
		return p, err
	}
	// The executor outlives the load's ctx only until stop: a cancelled
	// bench still shuts it down through stop.
	if err = p.srv.Start(context.WithoutCancel(ctx)); err != nil {
		return p, err
	}
	if p.l, err = serve(p.srv.Handler()); err != nil {
		return p, err
	}
	return p, nil
}

// stop stops HTTP, then the executor (running tools get the server's
// grace), closes the database and removes the temporary directory.
func (p *inProcess) stop(ctx context.Context) error {
	var errs []error
	if p.l != nil {
		errs = append(errs, p.l.stop(ctx))
	}
	if p.srv != nil {
		errs = append(errs, p.srv.Shutdown(ctx))
	}
	if p.st != nil {
		errs = append(errs, p.st.Close())
	}
	errs = append(errs, os.RemoveAll(p.dir))
	return errors.Join(errs...)
}

// bareHandler is the ceiling: it reads the request body, as the service
// does, and writes a small JSON reply, and nothing else.
func bareHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, 1<<20))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		_, _ = io.WriteString(w, `{"ok":true}`+"\n")
	})
}

// ServeBare serves the ceiling's bare handler on addr, with the same
// http.Server settings as the service, until ctx ends: the ceiling for a
// load generator other than bench's own (scripts/perf drives it with wrk).
func ServeBare(ctx context.Context, addr string) error {
	return Serve(ctx, addr, bareHandler())
}

// Serve serves h on addr with the service's http.Server settings until ctx
// ends, so a handler scripts/perf compares with the service (the bare
// ceiling, the durable floor) differs from it only in the handler.
func Serve(ctx context.Context, addr string, h http.Handler) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", addr, err)
	}
	hs := newHTTPServer(h)
	go func() {
		<-ctx.Done()
		_ = hs.Close()
	}()
	if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
