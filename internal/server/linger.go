package server

import (
	"io"
	"net/http"
	"sync/atomic"
	"time"
)

// A refusal written before its request body was read (413 for a declared
// length over MaxBodyBytes, 503 overloaded, 401, 400 for a missing key)
// leaves the body unread. net/http then closes the connection at once,
// and a close with unread data resets it: a client still sending (urllib
// sends the whole body before it reads) loses the answer it was sent.
// lingerUnread closes such a connection the way RFC 9112 §9.6 asks and
// nginx does: answer, half-close the sending side, read and discard what
// the client still sends, bounded in time and bytes, then close.
const (
	// lingerTime bounds how long a refused request's connection is read
	// and discarded after the answer.
	lingerTime = 5 * time.Second
	// lingerMaxBytes bounds how much is discarded; a client sending more
	// gets the reset after all.
	lingerMaxBytes = 64 << 20
	// closeUnreadAbove is how much unread body makes net/http close the
	// connection rather than discard the rest itself (its
	// maxPostHandlerReadBytes).
	closeUnreadAbove = 256 << 10
)

// lingerUnread wraps the whole handler (outermost: it needs the
// connection's own ResponseWriter to hijack it).
func lingerUnread(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength == 0 || r.ProtoMajor != 1 || r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		body := &eofReader{ReadCloser: r.Body}
		r.Body = body
		lw := &lingerWriter{ResponseWriter: w, r: r, body: body}
		next.ServeHTTP(lw, r)
		if lw.closing && !body.eof.Load() {
			linger(w)
		}
	})
}

// linger sends the answer, half-closes the connection and discards what
// the client still sends (bounded), so the answer is read before the close.
func linger(w http.ResponseWriter) {
	rc := http.NewResponseController(w)
	if rc.Flush() != nil {
		return
	}
	conn, brw, err := rc.Hijack()
	if err != nil {
		return // not HTTP/1 over a conn of its own: net/http closes it as before
	}
	defer conn.Close()
	if cw, ok := conn.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite() // FIN after the answer: the client's read ends cleanly
	}
	_ = conn.SetReadDeadline(time.Now().Add(lingerTime))
	_, _ = io.CopyN(io.Discard, brw.Reader, lingerMaxBytes)
}

// eofReader remembers how much of the body was read and whether to its end.
type eofReader struct {
	io.ReadCloser
	n   atomic.Int64
	eof atomic.Bool
}

func (b *eofReader) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	if err == io.EOF {
		b.eof.Store(true)
	}
	return n, err
}

// lingerWriter decides, when the answer starts, whether the connection
// will be closed with body unread: then it says Connection: close, so a
// keep-alive client does not send its next request on it.
type lingerWriter struct {
	http.ResponseWriter
	r       *http.Request
	body    *eofReader
	decided bool
	closing bool
}

func (w *lingerWriter) WriteHeader(code int) {
	if !w.decided {
		w.decided = true
		if !w.body.eof.Load() && (w.r.Close || w.r.ContentLength < 0 || w.r.ContentLength-w.body.n.Load() >= closeUnreadAbove) {
			w.closing = true
			w.Header().Set("Connection", "close")
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *lingerWriter) Write(b []byte) (int, error) {
	if !w.decided {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *lingerWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
