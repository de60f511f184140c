package console

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/idemctl/idemctl/internal/store"
)

// callsData is the calls page's model.
type callsData struct {
	Statuses []store.Status
	// The filter as given (shown back in the form).
	Status, Tool, Key, Since, Until string
	Calls                           []store.Call
	Next                            url.Values // nil on the last page
	First                           url.Values // nil on the first page
	Filtered                        bool
}

// timeLayouts are the forms the time filters accept, all UTC unless they
// carry a zone: what <input type="datetime-local"> sends, and RFC 3339.
var timeLayouts = []string{"2006-01-02T15:04", "2006-01-02T15:04:05", time.RFC3339Nano}

func parseTime(v string) (*float64, error) {
	for _, l := range timeLayouts {
		if t, err := time.Parse(l, v); err == nil {
			sec := float64(t.Unix()) + float64(t.Nanosecond())/1e9
			return &sec, nil
		}
	}
	return nil, errors.New("bad time")
}

// calls is GET /ui/calls?status=&tool=&key=&since=&until=&after=: the
// principal's calls, newest first, a page at a time (keyset, as GET
// /v1/tool-calls, with the API's own cursor). key is a key prefix.
func (c *console) calls(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	principal := principalOf(r)
	d := callsData{Statuses: store.Statuses, Status: q.Get("status"), Tool: q.Get("tool"), Key: q.Get("key"),
		Since: q.Get("since"), Until: q.Get("until")}
	d.Filtered = d.Status != "" || d.Tool != "" || d.Key != "" || d.Since != "" || d.Until != ""
	f := store.ListFilter{Principal: &principal, Tool: d.Tool, KeyPrefix: d.Key, Limit: c.cfg.PageSize + 1}
	if d.Status != "" {
		if st := store.Status(d.Status); !st.Valid() {
			c.fail(w, r, http.StatusBadRequest, "status must be pending, running, succeeded or failed.")
			return
		}
		f.Status = store.Status(d.Status)
	}
	for _, tf := range []struct {
		v   string
		dst **float64
	}{{d.Since, &f.Since}, {d.Until, &f.Until}} {
		if tf.v == "" {
			continue
		}
		ts, err := parseTime(tf.v)
		if err != nil {
			c.fail(w, r, http.StatusBadRequest, "since and until must be times such as 2026-12-01T11:00 (UTC) or RFC 3339.")
			return
		}
		*tf.dst = ts
	}
	filter := d.values()
	if a := q.Get("after"); a != "" {
		cur, err := c.cfg.DecodeCursor(a)
		if err != nil {
			c.fail(w, r, http.StatusBadRequest, "The page cursor (after) is not one this server made.")
			return
		}
		f.After = &cur
		d.First = filter
	}
	calls, err := c.cfg.Store.ListCalls(r.Context(), f)
	if err != nil {
		c.storeError(w, r, err)
		return
	}
	// One call more than a page tells whether there is a next page.
	if len(calls) > c.cfg.PageSize {
		calls = calls[:c.cfg.PageSize]
		d.Next = d.values()
		d.Next.Set("after", c.cfg.EncodeCursor(store.CursorOf(calls[len(calls)-1])))
	}
	d.Calls = calls
	c.render(w, r, http.StatusOK, "calls.html", page{Title: "Calls", Nav: "calls", Data: d})
}

func (d callsData) values() url.Values {
	v := url.Values{}
	for _, kv := range [][2]string{{"status", d.Status}, {"tool", d.Tool}, {"key", d.Key}, {"since", d.Since}, {"until", d.Until}} {
		if kv[1] != "" {
			v.Set(kv[0], kv[1])
		}
	}
	return v
}

// search is GET /ui/search?q=: a call id or an idempotency key of the
// principal goes straight to that call; anything else lists the calls
// whose key starts with q.
func (c *console) search(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	q := strings.TrimSpace(r.URL.Query().Get("q"))
	if q == "" {
		http.Redirect(w, r, Prefix+"/calls", http.StatusSeeOther)
		return
	}
	principal := principalOf(r)
	if c.cfg.ValidCallID(q) {
		call, err := c.cfg.Store.Get(ctx, principal, q)
		if err == nil {
			http.Redirect(w, r, Prefix+"/calls/"+call.CallID, http.StatusSeeOther)
			return
		}
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			c.storeError(w, r, err)
			return
		}
	}
	call, err := c.cfg.Store.GetByKey(ctx, principal, q)
	if err == nil {
		http.Redirect(w, r, Prefix+"/calls/"+call.CallID, http.StatusSeeOther)
		return
	}
	if !errors.Is(err, store.ErrNotFound) {
		c.storeError(w, r, err)
		return
	}
	http.Redirect(w, r, Prefix+"/calls?"+url.Values{"key": {q}}.Encode(), http.StatusSeeOther)
}
