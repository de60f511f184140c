package server

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/idemctl/idemctl/internal/logkey"
	"github.com/idemctl/idemctl/internal/store"
)

// Error codes: stable API, clients branch on them (docs/api.md, "Errors").
const (
	codeMissingKey       = "missing_idempotency_key"
	codeBadRequest       = "bad_request"
	codeConflict         = "idempotency_conflict"
	codeNotFound         = "not_found"
	codePayloadTooLarge  = "payload_too_large"
	codeMethodNotAllowed = "method_not_allowed"
	codeUnavailable      = "unavailable"
	codeOverloaded       = "overloaded"
	codeInternal         = "internal"
	codeUnauthenticated  = "unauthenticated"
)

// CallPath is the path of a call's resource; Location and query_url use it.
func CallPath(callID string) string { return "/v1/tool-calls/" + callID }

// CallView is the JSON shape of a call (docs/api.md, "The call object"). Result and Error are the
// stored JSON, or null. Times are Unix seconds.
type CallView struct {
	CallID string `json:"call_id"`
	// Principal is who recorded the call; omitted for the default
	// principal (a server without auth).
	Principal   string          `json:"principal,omitempty"`
	IdemKey     string          `json:"idem_key"`
	Tool        string          `json:"tool"`
	Args        json.RawMessage `json:"args"`
	Status      store.Status    `json:"status"`
	Attempt     int64           `json:"attempt"`
	Result      json.RawMessage `json:"result"`
	Error       json.RawMessage `json:"error"`
	EffectID    *string         `json:"effect_id"`
	ClientID    *string         `json:"client_id,omitempty"`
	Seq         *int64          `json:"seq,omitempty"`
	Fingerprint string          `json:"fingerprint"`
	CreatedAt   float64         `json:"created_at"`
	UpdatedAt   float64         `json:"updated_at"`
	QueryURL    string          `json:"query_url"`
	// CancelRequested is set when a cancel reached the call while it ran.
	CancelRequested bool `json:"cancel_requested,omitempty"`
	// Via is the door the call came through: "http" (this API) or "mcp"
	// (the MCP front door).
	Via string `json:"via"`
	// NotBefore is when a pending call whose server-side retry was
	// scheduled may run again (Unix seconds, the database's clock);
	// omitted otherwise.
	NotBefore *float64 `json:"not_before,omitempty"`
}

// viewOf renders a stored call. A nil json.RawMessage marshals as null.
func viewOf(c store.Call) CallView {
	return CallView{
		CallID:      c.CallID,
		Principal:   c.Principal,
		IdemKey:     c.IdemKey,
		Tool:        c.Tool,
		Args:        nonNilJSON(c.ArgsJSON, "{}"),
		Status:      c.Status,
		Attempt:     c.Attempt,
		Result:      nullable(c.ResultJSON),
		Error:       nullable(c.ErrorJSON),
		EffectID:    c.EffectID,
		ClientID:    c.ClientID,
		Seq:         c.Seq,
		Fingerprint: c.Fingerprint,
		CreatedAt:   c.CreatedAt,
		UpdatedAt:   c.UpdatedAt,
		QueryURL:    CallPath(c.CallID),

		CancelRequested: c.CancelRequested,
		NotBefore:       notBefore(c),
		Via:             store.ViaOf(c.Via),
	}
}

// notBefore is the call's not-before time while it waits for a scheduled
// retry; a claim leaves the column in place (then in the past), so it is
// shown for pending calls only.
func notBefore(c store.Call) *float64 {
	if c.Status != store.StatusPending {
		return nil
	}
	return c.NotBefore
}

func nullable(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return nil // marshals as null
	}
	return raw
}

func nonNilJSON(raw json.RawMessage, def string) json.RawMessage {
	if len(raw) == 0 {
		return json.RawMessage(def)
	}
	return raw
}

// ErrorBody is the JSON shape of every error response.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
	// Call, on already_final only, is the call as it ended.
	Call *CallView `json:"call,omitempty"`
}

// ErrorDetail is the inner object of ErrorBody. Clients branch on Code.
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// CallID, on idempotency_conflict only, is the call that already holds
	// the key, so a client can read it (GET /v1/tool-calls/{call_id}).
	CallID string `json:"call_id,omitempty"`
}

// StatsView is the /stats body: logical calls against side effects, and
// the queue.
type StatsView struct {
	Calls    int64                  `json:"calls"`
	Effects  int64                  `json:"effects"`
	ByStatus map[store.Status]int64 `json:"by_status"`
	Queue    QueueView              `json:"queue"`
}

// QueueView is the queue part of /stats (docs/api.md, "Health, stats and
// metrics").
type QueueView struct {
	// Depth is the number of pending calls in the database (read now).
	Depth int64 `json:"depth"`
	// OldestPendingAgeSeconds is how long ago the oldest pending call was
	// created, by the database's clock; 0 when none is pending.
	OldestPendingAgeSeconds float64 `json:"oldest_pending_age_seconds"`
	// MaxPending is this server's limit (--max-pending); 0 = unlimited.
	MaxPending int64 `json:"max_pending"`
	// Refused counts the new keys this server refused because the queue
	// was full, since it started.
	Refused int64 `json:"refused"`
}

// statusView is the /healthz and /readyz body.
type statusView struct {
	Status string `json:"status"`
}

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
		body = []byte(`{"error":{"code":"internal","message":"response encoding failed"}}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)+1))
	h.Set("Cache-Control", "no-store") // calls change state; never serve a stale one
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n')) // a failed write means the client left
}

// writeError writes the error shape of docs/api.md, "Errors".
func writeError(w http.ResponseWriter, log *slog.Logger, status int, code, message string) {
	writeJSON(w, log, status, ErrorBody{Error: ErrorDetail{Code: code, Message: message}})
}

// writeAPIError writes an *apiError.
func writeAPIError(w http.ResponseWriter, log *slog.Logger, e *apiError) {
	if e.status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1") // every 503 stored nothing: retry with the same key
	}
	writeJSON(w, log, e.status, ErrorBody{Error: ErrorDetail{Code: e.code, Message: e.message, CallID: e.callID}})
}
