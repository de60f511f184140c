package console

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"

	"github.com/idemctl/idemctl/internal/store"
)

// timelineEntry is one audit event as the timeline draws it: the event,
// its time, and what the detail says in a few labelled chips.
type timelineEntry struct {
	Event   string
	TS      float64
	Elapsed float64
	// Text is the detail without what the chips show.
	Text  string
	Chips []chip
}

type chip struct{ Label, Value string }

// The wording of these details is decided in store/detail.go
// (DetailExtensions, DetailRetryScheduled); TestCallTimeline
// fails if it changes under these patterns.
var (
	extensionsRe = regexp.MustCompile(`; lease extended (\d+) times?$`)
	retryDelayRe = regexp.MustCompile(`^in (\S+) after `)
)

// timeline turns a call's audit rows into timeline entries: a claim gets
// its owner and attempt (the claims are the attempts, in order), a
// completion its heartbeats (lease extensions), a scheduled retry its
// delay.
func timeline(events []store.AuditEvent) []timelineEntry {
	var out []timelineEntry
	var attempt int64
	for _, e := range events {
		t := timelineEntry{Event: e.Event, TS: e.TS, Elapsed: e.TS - events[0].TS, Text: e.Detail}
		if m := extensionsRe.FindStringSubmatch(t.Text); m != nil {
			t.Text = strings.TrimSuffix(t.Text, m[0])
			t.Chips = append(t.Chips, chip{"heartbeats", m[1]})
		}
		switch e.Event {
		case store.EventCreated:
			t.Chips = append([]chip{{"tool", store.CreatedTool(e)}}, t.Chips...)
			t.Text = ""
			if owner, ok := store.ClaimOf(e); ok {
				// Claimed at creation: one row tells both steps.
				attempt++
				t.Chips = append(t.Chips, chip{"claimed by", owner}, chip{"attempt", strconv.FormatInt(attempt, 10)})
			}
		case store.EventClaimed:
			attempt++
			t.Chips = append([]chip{{"owner", t.Text}, {"attempt", strconv.FormatInt(attempt, 10)}}, t.Chips...)
			t.Text = ""
		case store.EventRetryScheduled:
			if m := retryDelayRe.FindStringSubmatch(t.Text); m != nil {
				t.Text = strings.TrimPrefix(t.Text, m[0])
				t.Chips = append([]chip{{"retry in", m[1]}}, t.Chips...)
			}
		case store.EventSucceeded:
			if t.Text != "no effect" {
				t.Chips = append([]chip{{"effect", t.Text}}, t.Chips...)
				t.Text = ""
			}
		}
		out = append(out, t)
	}
	return out
}

// callData is the call page's model.
type callData struct {
	Call     store.Call
	Effect   *store.Effect
	Timeline []timelineEntry
	// Deliveries are the call's webhook deliveries, oldest first.
	Deliveries []store.Delivery
	Curl       string
	// Cancelable: pending or running.
	Cancelable bool
	// Notice is the outcome of a cancel just made.
	Notice string
	// NeedsAttention: the call failed with code outcome_unknown, and only
	// an operator can settle it (store.Resolvable).
	NeedsAttention bool
}

// cancelNotices are the messages a cancel's redirect may ask the call
// page to show; any other value shows nothing.
var cancelNotices = map[string]string{
	"canceled":  "The call was pending: it is now failed with code canceled.",
	"requested": "The call is running: its worker was asked to stop it. It ends failed canceled unless the tool finishes first.",
	"final":     "The call had already finished; nothing was changed.",
}

// loadCall reads the principal's call, or answers 404 (another
// principal's call is not found, exactly as in the API).
func (c *console) loadCall(w http.ResponseWriter, r *http.Request) (store.Call, bool) {
	id := r.PathValue("call_id")
	if !c.cfg.ValidCallID(id) {
		c.fail(w, r, http.StatusNotFound, "No such call.")
		return store.Call{}, false
	}
	call, err := c.cfg.Store.Get(r.Context(), principalOf(r), id)
	if errors.Is(err, store.ErrNotFound) {
		c.fail(w, r, http.StatusNotFound, "No such call.")
		return store.Call{}, false
	}
	if err != nil {
		c.storeError(w, r, err)
		return store.Call{}, false
	}
	return call, true
}

// call is GET /ui/calls/{call_id}: the call's fields, its result or
// error, its effect row, its webhook deliveries, its audit timeline and a
// curl that reads it.
func (c *console) call(w http.ResponseWriter, r *http.Request) {
	call, ok := c.loadCall(w, r)
	if !ok {
		return
	}
	ctx := r.Context()
	events, err := c.cfg.Store.Audit(ctx, call.CallID, 0) // the whole timeline
	if err != nil {
		c.storeError(w, r, err)
		return
	}
	d := callData{Call: call, Timeline: timeline(events), Curl: c.curl(r, call.CallID),
		Cancelable: !call.Status.Final(), Notice: cancelNotices[r.URL.Query().Get("cancel")],
		NeedsAttention: store.Resolvable(call)}
	if d.Deliveries, err = c.cfg.Store.Deliveries(ctx, call.CallID); err != nil {
		c.storeError(w, r, err)
		return
	}
	if eff, err := c.cfg.Store.EffectOf(ctx, call.CallID); err == nil {
		d.Effect = &eff
	} else if !errors.Is(err, store.ErrNotFound) {
		c.storeError(w, r, err)
		return
	}
	c.render(w, r, http.StatusOK, "call.html", page{Title: call.CallID, Nav: "calls", Data: d})
}

// curl is the command that reads the call through the API. It names the
// token $IDEMCTL_TOKEN, never the real one.
func (c *console) curl(r *http.Request, id string) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	auth := ""
	if c.cfg.Authenticate != nil {
		auth = `-H "Authorization: Bearer $IDEMCTL_TOKEN" `
	}
	return fmt.Sprintf("curl -sS %s'%s://%s/v1/tool-calls/%s'", auth, scheme, strings.ReplaceAll(r.Host, "'", ""), id)
}

// cancelPage is GET /ui/calls/{call_id}/cancel: the confirmation.
func (c *console) cancelPage(w http.ResponseWriter, r *http.Request) {
	call, ok := c.loadCall(w, r)
	if !ok {
		return
	}
	c.render(w, r, http.StatusOK, "cancel.html", page{Title: "Cancel " + call.CallID, Nav: "calls", Data: call})
}

// cancel is POST /ui/calls/{call_id}/cancel: with a valid CSRF token, the
// server's cancel path, then back to the call page saying what happened.
func (c *console) cancel(w http.ResponseWriter, r *http.Request) {
	if !c.checkPost(w, r, true) {
		return
	}
	id := r.PathValue("call_id")
	if !c.cfg.ValidCallID(id) {
		c.fail(w, r, http.StatusNotFound, "No such call.")
		return
	}
	_, out, err := c.cfg.Cancel(r.Context(), principalOf(r), id)
	if errors.Is(err, store.ErrNotFound) {
		c.fail(w, r, http.StatusNotFound, "No such call.")
		return
	}
	if err != nil {
		c.storeError(w, r, err)
		return
	}
	notice := "final"
	switch out {
	case store.Canceled:
		notice = "canceled"
	case store.CancelRequested:
		notice = "requested"
	}
	http.Redirect(w, r, Prefix+"/calls/"+id+"?cancel="+notice, http.StatusSeeOther)
}
