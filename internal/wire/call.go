package wire

import (
	"encoding/json"
	"time"
)

// Status is the state of a call (docs/lifecycle.md, "States"): pending →
// running → succeeded | failed. The store records the same values.
type Status string

// The four states of a call. succeeded and failed are final, except that a
// same-key request resets a retryable failure to pending.
const (
	StatusPending   Status = "pending"
	StatusRunning   Status = "running"
	StatusSucceeded Status = "succeeded"
	StatusFailed    Status = "failed"
)

// Statuses lists every status in lifecycle order: the one list of them.
var Statuses = []Status{StatusPending, StatusRunning, StatusSucceeded, StatusFailed}

// Valid reports whether s is one of Statuses.
func (s Status) Valid() bool {
	for _, v := range Statuses {
		if s == v {
			return true
		}
	}
	return false
}

// Final reports whether s is a final state.
func (s Status) Final() bool { return s == StatusSucceeded || s == StatusFailed }

// Call is the call object (docs/api.md, "The call object"): the one Go
// type of its JSON. The field order is the order the server writes;
// Result and Error are the stored JSON or null; times are Unix seconds by
// the database's clock. A test pins the rendered names and order
// (TestCallJSONShape).
type Call struct {
	CallID string `json:"call_id"`
	// Principal is who recorded the call; omitted for the default
	// principal (a server without auth).
	Principal   string          `json:"principal,omitempty"`
	IdemKey     string          `json:"idem_key"`
	Tool        string          `json:"tool"`
	Args        json.RawMessage `json:"args"`
	Status      Status          `json:"status"`
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
	// scheduled may run again; omitted otherwise.
	NotBefore *float64 `json:"not_before,omitempty"`
	// NotifyURL is where each final state of the call is delivered (a
	// webhook: docs/api.md, "Completion webhooks"); omitted when none.
	NotifyURL *string `json:"notify_url,omitempty"`
}

// CallRequest is the body of POST /v1/tool-calls (docs/api.md,
// "Submitting a call"). Only Tool and Args make the fingerprint: ClientID
// and Seq label the call, NotifyURL says where to tell of its end, not
// what to do.
type CallRequest struct {
	Tool      string `json:"tool"`
	Args      any    `json:"args"`
	ClientID  string `json:"client_id,omitempty"`
	Seq       *int64 `json:"seq,omitempty"`
	NotifyURL string `json:"notify_url,omitempty"`
}

// Final reports whether the call reached succeeded or failed.
func (c Call) Final() bool { return c.Status.Final() }

// ReceivedCall is a call as a client received it: decoded, and the bytes
// the server sent, which printers prefer (they keep fields a newer server
// added, and the server's own spelling). The server renders Call, never
// this.
type ReceivedCall struct {
	Call
	// Raw is the call exactly as the server sent it; nil when the call was
	// built here (it then marshals from the fields).
	Raw json.RawMessage `json:"-"`
}

// MarshalJSON prints the server's own bytes when they are known.
func (c ReceivedCall) MarshalJSON() ([]byte, error) {
	if len(c.Raw) > 0 {
		return c.Raw, nil
	}
	return json.Marshal(c.Call)
}

// UnmarshalJSON decodes the call and keeps its bytes as Raw.
func (c *ReceivedCall) UnmarshalJSON(b []byte) error {
	var call Call
	if err := json.Unmarshal(b, &call); err != nil {
		return err
	}
	c.Call, c.Raw = call, append(json.RawMessage(nil), b...)
	return nil
}

// CallError is a failed call's error object, {"code","message",
// "retryable"} (docs/api.md, "The call object"): what a tool reports and
// the server stores as the call's error. Retryable tells a same-key
// request that it may reset the call and run it again.
type CallError struct {
	Code      string `json:"code"`
	Message   string `json:"message"`
	Retryable bool   `json:"retryable"`
	// Status is the downstream HTTP status of an http tool's failure
	// (docs/tools.md, "The http kind"); 0 (omitted) otherwise.
	Status int `json:"status,omitempty"`
	// Body is the downstream's answer to a rejected request: its JSON, or
	// a JSON string when it is not JSON. Omitted when empty.
	Body json.RawMessage `json:"body,omitempty"`
	// Unknown is the case of an outcome_unknown error (UnknownTimeoutAfterSend,
	// UnknownResetAfterSend, UnknownAbandoned); omitted for every other code.
	Unknown string `json:"unknown,omitempty"`
	// RetryAfter is how long the downstream asked to wait before the next
	// attempt (an HTTP Retry-After), 0 if it said nothing. A server-side
	// retry waits at least this long (docs/lifecycle.md, "Server-side
	// retries"). It travels with the error to the retry policy but is not
	// part of the stored object.
	RetryAfter time.Duration `json:"-"`
}

// Error makes a CallError usable as an error value.
func (e *CallError) Error() string { return e.Code + ": " + e.Message }
