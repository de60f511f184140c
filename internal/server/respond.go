package server

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/idemctl/idemctl/internal/logkey"
	"github.com/idemctl/idemctl/internal/wire"
)

// marshalJSON is json.Marshal without HTML escaping: json.Marshal writes
// "<", ">" and "&" as \u003c, \u003e and \u0026, the same JSON but
// unreadable in a message like "amount must be >= 1". Bodies are
// application/json with nosniff, never HTML, so the escaping protects
// nothing here. Stored error objects use it too, since they are served as
// they are stored.
func marshalJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil // Encode appends a newline
}

// writeJSON writes v as the JSON response with status (HTML characters
// unescaped, see marshalJSON). Encoding happens before the header is
// written, so a value that cannot be encoded becomes a clean 500 instead of
// a truncated 200.
func writeJSON(w http.ResponseWriter, log *slog.Logger, status int, v any) {
	body, err := marshalJSON(v)
	if err != nil {
		log.Error("encoding response", logkey.Err, err)
		status = http.StatusInternalServerError
		body, _ = json.Marshal(wire.Error{Error: wire.ErrorDetail{Code: wire.CodeInternal, Message: "response encoding failed"}}) // cannot fail: two strings
	}
	writeBody(w, status, append(body, '\n'))
}

// The constant values of writeBody's headers, under their canonical
// keys, shared by every response instead of a slice allocated per Set.
// Sharing is safe: nothing writes into a header's slice in place (Set
// replaces it, and Add's append copies a slice as full as these).
var (
	headerJSON    = []string{"application/json"}
	headerNoStore = []string{"no-store"}
	headerNosniff = []string{"nosniff"}
)

// writeBody writes body, a JSON value and its final newline, as the
// response with status, with writeJSON's headers. body is only read.
func writeBody(w http.ResponseWriter, status int, body []byte) {
	h := w.Header()
	h["Content-Type"] = headerJSON
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h["Cache-Control"] = headerNoStore // calls change state; never serve a stale one
	h["X-Content-Type-Options"] = headerNosniff
	w.WriteHeader(status)
	_, _ = w.Write(body) // a failed write means the client left
}

// writeError writes the error shape of docs/api.md, "Errors".
func writeError(w http.ResponseWriter, log *slog.Logger, status int, code, message string) {
	noteErrorCode(w, code)
	writeJSON(w, log, status, wire.Error{Error: wire.ErrorDetail{Code: code, Message: message}})
}

// writeAPIError writes an *apiError.
func writeAPIError(w http.ResponseWriter, log *slog.Logger, e *apiError) {
	noteErrorCode(w, e.code)
	if e.status == http.StatusServiceUnavailable {
		// every 503 stored nothing: retry with the same key
		w.Header().Set(wire.HeaderRetryAfter, strconv.Itoa(max(e.retryAfter, 1)))
	}
	writeJSON(w, log, e.status, wire.Error{Error: wire.ErrorDetail{Code: e.code, Message: e.message, CallID: e.callID, PurgedAt: e.purgedAt}})
}
