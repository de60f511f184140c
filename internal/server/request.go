package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/idemctl/idemctl/internal/fingerprint"
	"github.com/idemctl/idemctl/internal/idemkey"
	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/toolreg"
	"github.com/idemctl/idemctl/internal/wire"
)

// Request limits (docs/api.md, "Limits").
const (
	// MaxBodyBytes caps a POST body; larger bodies get 413 payload_too_large.
	MaxBodyBytes = 1 << 20
	// MaxKeyLength caps the Idempotency-Key header.
	MaxKeyLength = idemkey.MaxLength
	// MaxClientIDLength caps client_id, a label a client sends and reads
	// back, not a payload: every answer that shows the call carries it.
	MaxClientIDLength = 255
)

// apiError is a refusal with its HTTP status and stable code (docs/api.md,
// "Errors").
type apiError struct {
	status  int
	code    string
	message string
	// callID names the call a conflicting key belongs to ("" otherwise).
	callID string
	// purgedAt, on idempotency_key_expired, is when the call was purged.
	purgedAt *float64
	// retryAfter, on a 503, is the Retry-After in whole seconds (0: 1).
	retryAfter int
}

func (e *apiError) Error() string { return e.code + ": " + e.message }

func badRequest(format string, a ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, code: wire.CodeBadRequest, message: fmt.Sprintf(format, a...)}
}

// idempotencyKey reads and checks the Idempotency-Key header: required, sent
// once, 1–255 visible ASCII characters (0x21–0x7E). Spaces, control and
// non-ASCII bytes are refused rather than normalized: the key is compared
// byte for byte, and a key that some proxy could rewrite is not an identity.
func idempotencyKey(h http.Header) (string, *apiError) {
	vals, ok := h[wire.HeaderIdempotencyKey]
	if !ok {
		return "", &apiError{status: http.StatusBadRequest, code: wire.CodeMissingIdempotencyKey,
			message: "the Idempotency-Key header is required: generate one key per logical call and reuse it on every retry"}
	}
	if len(vals) != 1 {
		return "", badRequest("Idempotency-Key must be sent once, got %d values", len(vals))
	}
	key := vals[0]
	if err := checkKey(key); err != nil {
		return "", err
	}
	return key, nil
}

// checkKey applies the key rules of docs/api.md, "Headers" (1–255 visible ASCII
// characters). A string that fails them can never have been recorded, so
// lookups by such a key are answered without asking the store.
func checkKey(key string) *apiError {
	if err := idemkey.Check(key); err != nil {
		return badRequest("Idempotency-Key %v", err)
	}
	return nil
}

// isCallID reports whether id has the only shape the server hands out:
// "c_" + 16 lowercase hex digits. Anything else is not found
// without a store lookup: PostgreSQL refuses NUL and invalid UTF-8 in a
// text parameter outright, which must be a 404, not a 500.
func isCallID(id string) bool {
	if len(id) != len("c_")+16 || !strings.HasPrefix(id, "c_") {
		return false
	}
	for i := len("c_"); i < len(id); i++ {
		if c := id[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// createRequest is a checked POST /v1/tool-calls body, ready to store.
type createRequest struct {
	Tool        string
	Args        map[string]any  // normalized
	ArgsJSON    json.RawMessage // canonical (RFC 8785) bytes of Args
	Fingerprint string
	ClientID    *string
	Seq         *int64
	// Intent and DedupWindow are set for a tool with a dedup rule
	// (intentOf); empty and 0 otherwise.
	Intent      string
	DedupWindow time.Duration
	// Via is the door (store.ViaHTTP, store.ViaMCP); "" is the API.
	Via string
	// NotifyURL is the body's notify_url (nil: none; submit then applies
	// the principal's default). Not part of the fingerprint: it says
	// where to tell of the call's end, not what to do, so a retry through
	// another replica with another callback is the same call.
	NotifyURL *string
}

// bodyFields are the only members a POST body may have.
var bodyFields = map[string]bool{"tool": true, "args": true, "client_id": true, "seq": true, "notify_url": true}

// parseCreate checks a POST body completely — syntax, members, tool (one
// principal may call), arguments (by the tool registry reg), fingerprint —
// so that a refused request stores nothing.
func parseCreate(body []byte, chaos bool, reg *toolreg.Registry, principal string) (createRequest, *apiError) {
	var req createRequest
	v, err := fingerprint.ParseJSON(body) // refuses duplicate members and trailing data
	if err != nil {
		return req, badRequest("body: %v", err)
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return req, badRequest("body must be a JSON object like {\"tool\": \"charge\", \"args\": {\"amount\": 100}}")
	}
	// A parsed string holds U+0000 only where the body has the escape
	// \u0000 (JSON refuses a raw NUL byte): without one, nothing to look for.
	if bytes.Contains(body, []byte(`\u0000`)) {
		if path, found := findNUL(obj, "$"); found {
			return req, badRequest("body: the string at %s contains U+0000 (NUL), which not every database can store", path)
		}
	}
	var unknown []string
	for name := range obj {
		if !bodyFields[name] {
			unknown = append(unknown, strconv.Quote(name))
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return req, badRequest("body: unknown member(s) %s (allowed: tool, args, client_id, seq, notify_url)", strings.Join(unknown, ", "))
	}

	req, aerr := checkToolCall(obj["tool"], obj["args"], chaos, reg, principal)
	if aerr != nil {
		return req, aerr
	}
	if raw := obj["client_id"]; raw != nil {
		s, ok := raw.(string)
		if !ok {
			return req, badRequest("body: client_id must be a string")
		}
		if len(s) > MaxClientIDLength {
			return req, badRequest("body: client_id is %d bytes; at most %d are allowed", len(s), MaxClientIDLength)
		}
		req.ClientID = &s
	}
	if raw := obj["seq"]; raw != nil {
		n, ok := raw.(json.Number)
		if !ok {
			return req, badRequest("body: seq must be an integer")
		}
		i, err := strconv.ParseInt(string(n), 10, 64)
		if err != nil {
			return req, badRequest("body: seq must be an integer, got %s", n)
		}
		req.Seq = &i
	}
	if raw := obj["notify_url"]; raw != nil {
		s, ok := raw.(string)
		if !ok {
			return req, badRequest("body: notify_url must be a string")
		}
		req.NotifyURL = &s
	}

	return req, nil
}

// checkToolCall checks the tool and args of a call, whichever door it came
// through (a POST body, an MCP tools/call): the tool is registered and
// principal may call it, the args are an object (absent or null meaning
// {}) that passes the tool's schema, and the fingerprint and canonical
// bytes can be made. tool and args are as fingerprint.ParseJSON returns
// them.
func checkToolCall(rawTool, rawArgs any, chaos bool, reg *toolreg.Registry, principal string) (createRequest, *apiError) {
	var req createRequest
	tool, ok := rawTool.(string)
	switch {
	case rawTool == nil:
		return req, badRequest("body: tool is required")
	case !ok:
		return req, badRequest("body: tool must be a string")
	case unlistedTool(reg, tool, principal):
		return req, upstreamUnavailable(tool)
	case !knownTool(reg, tool):
		// Only the tools principal may call are named.
		return req, badRequest("body: unknown tool %q (known: %s)", tool, strings.Join(reg.For(principal).Names(), ", "))
	}
	// Before the args: a principal that may not call the tool learns
	// nothing of its schema either.
	if aerr := toolAccess(reg, tool, principal); aerr != nil {
		return req, aerr
	}
	req.Tool = tool

	// args absent or null both mean {}: a null member means the same as an
	// absent one, as it does inside args for the fingerprint.
	args := map[string]any{}
	if rawArgs != nil {
		a, ok := rawArgs.(map[string]any)
		if !ok {
			return req, badRequest("body: args must be a JSON object")
		}
		args = a
	}
	norm, err := fingerprint.Normalize(args)
	if err != nil {
		return req, badRequest("args: %v", err)
	}
	req.Args = norm.(map[string]any)
	if err := validateArgs(reg, tool, req.Args, chaos); err != nil {
		return req, err
	}
	// The canonical bytes are made once: stored as the args, and hashed
	// into the fingerprint.
	if req.ArgsJSON, err = fingerprint.Canonical(req.Args); err != nil {
		return req, badRequest("args: %v", err)
	}
	if req.Fingerprint, err = fingerprint.OfNormalized(tool, req.Args, req.ArgsJSON); err != nil {
		return req, badRequest("args: %v", err)
	}
	if t, ok := reg.Lookup(tool); ok && t.Dedup != nil {
		if req.Intent, err = intentOf(tool, t.Dedup.Args, req.Args); err != nil {
			return req, badRequest("args: %v", err)
		}
		req.DedupWindow = t.Dedup.Window
	}
	return req, nil
}

// intentOf is the intent fingerprint of a call of a tool with a dedup rule
// (docs/tools.md, "The tool registry"): the version 1 fingerprint
// (fingerprint.Of: SHA-256 of the canonical JSON of {"tool", "args"}) of
// the tool and of the normalized args reduced to the rule's names. An
// absent or null argument is absent from the reduced args, so a call
// without one matches another without it; every other argument, the
// chaos "_" ones included, is left out. It is decided here, above the
// store, which only compares it.
func intentOf(tool string, names []string, args map[string]any) (string, error) {
	sel := make(map[string]any, len(names))
	for _, n := range names {
		if v, ok := args[n]; ok {
			sel[n] = v
		}
	}
	return fingerprint.Of(tool, sel)
}

// newCall turns a checked request into the row CreateOrGet records.
func (r createRequest) newCall(callID, principal, key string) store.NewCall {
	return store.NewCall{
		CallID:      callID,
		Principal:   principal,
		IdemKey:     key,
		Fingerprint: r.Fingerprint,
		ClientID:    r.ClientID,
		Seq:         r.Seq,
		Tool:        r.Tool,
		ArgsJSON:    r.ArgsJSON,
		Intent:      r.Intent,
		DedupWindow: r.DedupWindow,
		Via:         r.Via,
		NotifyURL:   r.NotifyURL,
	}
}

// preferWait returns the wait=N preference of RFC 7240 Prefer headers,
// clamped to max; ok is false when there is none, it is malformed, or it is
// zero (nothing to apply). Preferences are comma separated and may carry
// ";"-parameters; the value may be quoted. Malformed preferences are ignored,
// as RFC 7240 §2 asks of servers.
func preferWait(h http.Header, max time.Duration) (time.Duration, bool) {
	for _, line := range h.Values(wire.HeaderPrefer) {
		for _, pref := range strings.Split(line, ",") {
			token, _, _ := strings.Cut(pref, ";") // parameters of wait are meaningless
			name, value, hasValue := strings.Cut(strings.TrimSpace(token), "=")
			if !strings.EqualFold(strings.TrimSpace(name), wire.PreferWait) || !hasValue {
				continue
			}
			value = strings.Trim(strings.TrimSpace(value), `"`)
			if value == "" || strings.TrimLeft(value, "0123456789") != "" {
				return 0, false // delta-seconds only: "1.5", "-1" are malformed
			}
			n, err := strconv.ParseInt(value, 10, 64)
			if err != nil || time.Duration(n) > max/time.Second {
				// Too many digits to parse is still a (huge) wait: clamp.
				return max, max > 0
			}
			d := time.Duration(n) * time.Second
			return d, d > 0
		}
	}
	return 0, false
}

// findNUL reports the path of the first string (member name or value) in a
// parsed body that contains U+0000. Such a string is refused: PostgreSQL
// text cannot hold NUL, so a client_id with one would fail its INSERT (500)
// and a fail tool's message with one would fail the audit row of every
// completion, leaving the call never final. One rule for the whole body
// keeps both backends accepting the same requests. Members are visited in
// sorted order, so with several NULs the same one is named every time.
func findNUL(v any, path string) (string, bool) {
	switch x := v.(type) {
	case string:
		return path, strings.IndexByte(x, 0) >= 0
	case map[string]any:
		names := make([]string, 0, len(x))
		for name := range x {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			p := path + "[" + strconv.Quote(name) + "]"
			if strings.IndexByte(name, 0) >= 0 {
				return p, true
			}
			if p, found := findNUL(x[name], p); found {
				return p, true
			}
		}
	case []any:
		for i, e := range x {
			if p, found := findNUL(e, path+"["+strconv.Itoa(i)+"]"); found {
				return p, true
			}
		}
	}
	return "", false
}
