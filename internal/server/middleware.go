package server

import (
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/idemctl/idemctl/internal/logkey"
	"github.com/idemctl/idemctl/internal/wire"
)

// statusWriter remembers the status code for metrics and whether anything
// was written (a panic after that cannot become a clean 500), and the
// code of an error body for the request's span (noteErrorCode).
type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
	code   string
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.status, w.wrote = http.StatusOK, true
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// instrument counts requests by route pattern (bounded label values: the
// mux's patterns, not raw paths) and status code, and names the request's
// span after the same pattern.
func (s *Server) instrument(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		defer func() {
			route := r.Pattern // set by the mux on this same request
			if route == "" || route == "/" {
				route = "unmatched"
			}
			status := sw.status
			if status == 0 {
				status = http.StatusOK
			}
			s.m.requests.WithLabelValues(route, strconv.Itoa(status)).Inc()
			s.m.requestSeconds.WithLabelValues(route).Observe(time.Since(start).Seconds())
			endRequestSpan(r, sw, status)
		}()
		next.ServeHTTP(sw, r)
	})
}

// recoverer turns a handler panic into 500 internal (logged with its stack)
// instead of a dropped connection or a crashed process.
func (s *Server) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			p := recover()
			if p == nil {
				return
			}
			if p == http.ErrAbortHandler {
				panic(p) // a deliberate abort: let net/http drop the connection
			}
			s.log.Error("handler panicked", logkey.Method, r.Method, logkey.Path, r.URL.Path,
				"panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			if sw, ok := w.(*statusWriter); ok && sw.wrote {
				// Part of a response is out; a 500 now would corrupt it.
				// Abort so the client sees a broken response, not a short one.
				panic(http.ErrAbortHandler)
			}
			writeError(w, s.log, http.StatusInternalServerError, wire.CodeInternal, "internal error")
		}()
		next.ServeHTTP(w, r)
	})
}

// slogPrinter adapts a slog.Logger to promhttp's Println-style ErrorLog.
type slogPrinter struct{ log *slog.Logger }

func (p slogPrinter) Println(v ...any) { p.log.Error(fmt.Sprint(v...)) }
