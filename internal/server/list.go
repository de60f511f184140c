package server

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/idemctl/idemctl/internal/callview"
	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/wire"
)

// Listing limits of GET /v1/tool-calls.
const (
	DefaultListLimit = 50
	MaxListLimit     = 500
)

// cursorJSON is a cursor's content before base64: opaque to clients,
// exact for us (Go writes a float64 in the shortest form that reads back
// to the same value).
type cursorJSON struct {
	T  float64 `json:"t"`
	ID string  `json:"id"`
}

func encodeCursor(c store.Cursor) string {
	b, _ := json.Marshal(cursorJSON{T: c.CreatedAt, ID: c.CallID}) // cannot fail: a float and a string
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(s string) (store.Cursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return store.Cursor{}, err
	}
	var c cursorJSON
	if err := json.Unmarshal(b, &c); err != nil {
		return store.Cursor{}, err
	}
	if !isCallID(c.ID) {
		return store.Cursor{}, fmt.Errorf("no call id")
	}
	return store.Cursor{CreatedAt: c.T, CallID: c.ID}, nil
}

// listParams are the query parameters GET /v1/tool-calls knows.
var listParams = map[string]bool{"status": true, "tool": true, "code": true, "limit": true, "after": true,
	"key_prefix": true, "since": true, "until": true}

// handleList is GET /v1/tool-calls?status=&tool=&code=&key_prefix=&since=&until=&limit=&after= (docs/api.md,
// "Listing calls"): the principal's calls, newest first, a page at a time.
// Paging by cursor (keyset) is stable: calls created meanwhile sort before
// the first page and never shift a later one.
func (s *Server) handleList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	for name := range q {
		if !listParams[name] {
			writeError(w, s.log, http.StatusBadRequest, wire.CodeBadRequest,
				"unknown query parameter "+strconv.Quote(name)+" (known: status, tool, code, key_prefix, since, until, limit, after)")
			return
		}
	}
	principal := principalOf(r.Context())
	f := store.ListFilter{Principal: &principal, Limit: DefaultListLimit, Tool: q.Get("tool"), Code: q.Get("code"),
		KeyPrefix: q.Get("key_prefix")}
	for name, dst := range map[string]**float64{"since": &f.Since, "until": &f.Until} {
		if v := q.Get(name); v != "" {
			ts, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				writeError(w, s.log, http.StatusBadRequest, wire.CodeBadRequest,
					name+" must be an RFC 3339 time such as 2026-12-01T11:00:00Z, got "+strconv.Quote(v))
				return
			}
			sec := float64(ts.Unix()) + float64(ts.Nanosecond())/1e9 // UnixNano overflows after 2262
			*dst = &sec
		}
	}
	if st := store.Status(q.Get("status")); st != "" {
		if !st.Valid() {
			writeError(w, s.log, http.StatusBadRequest, wire.CodeBadRequest,
				"status must be pending, running, succeeded or failed, got "+strconv.Quote(string(st)))
			return
		}
		f.Status = st
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxListLimit {
			writeError(w, s.log, http.StatusBadRequest, wire.CodeBadRequest,
				fmt.Sprintf("limit must be an integer from 1 to %d, got %q", MaxListLimit, v))
			return
		}
		f.Limit = n
	}
	if v := q.Get("after"); v != "" {
		c, err := decodeCursor(v)
		if err != nil {
			writeError(w, s.log, http.StatusBadRequest, wire.CodeBadRequest,
				"after must be the next cursor of a previous page")
			return
		}
		f.After = &c
	}
	limit := f.Limit
	f.Limit++ // one more than asked: whether there is a next page
	calls, err := s.st.ListCalls(r.Context(), f)
	if err != nil {
		s.storeError(w, r, err)
		return
	}
	out := wire.Page[wire.Call]{Calls: make([]wire.Call, 0, min(len(calls), limit))}
	for i, c := range calls {
		if i == limit {
			next := encodeCursor(store.CursorOf(calls[limit-1]))
			out.Next = &next
			break
		}
		out.Calls = append(out.Calls, callview.Of(c))
	}
	writeJSON(w, s.log, http.StatusOK, out)
}
