package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/sqlite"
	"github.com/idemctl/idemctl/internal/tool"
	"github.com/idemctl/idemctl/internal/toolreg"
	"github.com/idemctl/idemctl/internal/wire"
)

// keylessDownstream is a payment API that ignores Idempotency-Key (every
// POST is a charge: the downstream on_unknown exists for) and answers a
// lookup by key: GET /charges?key=K is 200 with the charge made under K,
// 404 without one, or lookupStatus when set. The next drop POSTs lose
// their answer (the connection is closed), after charging when
// chargeBeforeDrop.
type keylessDownstream struct {
	mu               sync.Mutex
	log              []string // "POST" and "LOOKUP", in order
	charges          map[string]int
	drop             int
	chargeBeforeDrop bool
	lookupStatus     int
	url              string
}

func newKeylessDownstream(t *testing.T) *keylessDownstream {
	d := &keylessDownstream{charges: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(d.serve))
	t.Cleanup(srv.Close)
	d.url = srv.URL
	return d
}

func (d *keylessDownstream) serve(w http.ResponseWriter, r *http.Request) {
	d.mu.Lock()
	defer d.mu.Unlock()
	key := r.Header.Get(wire.HeaderIdempotencyKey)
	if r.Method == http.MethodGet {
		d.log = append(d.log, "LOOKUP")
		k := r.URL.Query().Get("key")
		switch {
		case d.lookupStatus != 0:
			w.WriteHeader(d.lookupStatus)
		case d.charges[k] > 0:
			fmt.Fprintf(w, `{"id":"ch_%s","idempotency_key":%q}`, k, k)
		default:
			w.WriteHeader(http.StatusNotFound)
		}
		return
	}
	d.log = append(d.log, "POST")
	if d.drop > 0 {
		d.drop--
		if d.chargeBeforeDrop {
			d.charges[key]++
		}
		if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
			conn.Close()
		}
		return
	}
	d.charges[key]++
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"id":"ch_%s","charged":true}`, key)
}

func (d *keylessDownstream) requests() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.log...)
}

func (d *keylessDownstream) chargesOf(key string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.charges[key]
}

// unknownTools is the tools file of a charge tool with policy on_unknown
// against d (three attempts, short backoff).
func unknownTools(t *testing.T, d *keylessDownstream, policy string) *toolreg.Registry {
	t.Helper()
	reg, err := toolreg.Parse([]byte(`
tools:
  - name: pay
    kind: http
    url: `+d.url+`/charges
    on_unknown: `+policy+`
    lookup: {url: "`+d.url+`/charges?key={effect_id}"}
    retry: {max_attempts: 3, initial_backoff: 10ms, max_backoff: 20ms}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

const payBody = `{"tool":"pay","args":{"amount":5}}`

func wantEvents(t *testing.T, got []string, want ...string) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("audit %v\n want %v", got, want)
	}
}

// TestLookupFound: the first attempt charges and its answer is lost; with
// on_unknown: lookup the next claim asks the downstream, which has the
// charge: the call succeeds with the lookup's answer as its result, one
// effect row, and the charge is never sent again.
func TestLookupFound(t *testing.T) {
	t.Parallel()
	d := newKeylessDownstream(t)
	d.drop, d.chargeBeforeDrop = 1, true
	b := setup(t, func(c *Config) { c.Tools = unknownTools(t, d, toolreg.OnUnknownLookup) })
	c := b.post("found", payBody).call(t)
	got := b.waitFinal(c.CallID)
	eff := tool.EffectID(c.CallID)
	want := fmt.Sprintf(`{"status":200,"body":{"id":"ch_%s","idempotency_key":"%s"},"effect_id":"%s"}`, eff, eff, eff)
	if got.Status != store.StatusSucceeded || string(got.Result) != want || got.Attempt != 2 ||
		got.EffectID == nil || *got.EffectID != eff {
		t.Fatalf("call %+v result %s; want succeeded at attempt 2 with %s", got, got.Result, want)
	}
	if r := d.requests(); !reflect.DeepEqual(r, []string{"POST", "LOOKUP"}) || d.chargesOf(eff) != 1 {
		t.Fatalf("downstream saw %v, %d charges; want POST then LOOKUP, one charge", r, d.chargesOf(eff))
	}
	wantEvents(t, b.events(c.CallID), store.EventCreated, store.EventClaimed, store.EventOutcomeUnknown,
		store.EventRetryScheduled, store.EventClaimed, store.EventLookupFound, store.EventSucceeded)
	if s := b.stats(); s.Effects != 1 {
		t.Fatalf("%d effect rows, want 1", s.Effects)
	}
}

// TestLookupNotFound: the first attempt's answer is lost before the
// downstream charged; the lookup finds nothing, and the attempt runs in
// the same claim: one charge, succeeded with the attempt's own answer.
func TestLookupNotFound(t *testing.T) {
	t.Parallel()
	d := newKeylessDownstream(t)
	d.drop = 1
	b := setup(t, func(c *Config) { c.Tools = unknownTools(t, d, toolreg.OnUnknownLookup) })
	c := b.post("not-found", payBody).call(t)
	got := b.waitFinal(c.CallID)
	eff := tool.EffectID(c.CallID)
	if got.Status != store.StatusSucceeded || got.Attempt != 2 || !strings.HasPrefix(string(got.Result), `{"status":201,`) {
		t.Fatalf("call %+v result %s; want succeeded at attempt 2 with the 201", got, got.Result)
	}
	if r := d.requests(); !reflect.DeepEqual(r, []string{"POST", "LOOKUP", "POST"}) || d.chargesOf(eff) != 1 {
		t.Fatalf("downstream saw %v, %d charges; want POST, LOOKUP, POST and one charge", r, d.chargesOf(eff))
	}
	wantEvents(t, b.events(c.CallID), store.EventCreated, store.EventClaimed, store.EventOutcomeUnknown,
		store.EventRetryScheduled, store.EventClaimed, store.EventLookupNotFound, store.EventSucceeded)
}

// TestLookupFails: a lookup that gets no usable answer never turns into a
// new attempt: it is retried with the tool's backoff; when the attempts
// run out the call ends failed outcome_unknown, retryable, and a same-key
// POST asks again first, which then finds the charge.
func TestLookupFails(t *testing.T) {
	t.Parallel()
	d := newKeylessDownstream(t)
	d.drop, d.chargeBeforeDrop, d.lookupStatus = 1, true, http.StatusServiceUnavailable
	b := setup(t, func(c *Config) { c.Tools = unknownTools(t, d, toolreg.OnUnknownLookup) })
	c := b.post("lookup-fails", payBody).call(t)
	got := b.waitFinal(c.CallID)
	var e wire.CallError
	if err := json.Unmarshal(got.Error, &e); err != nil {
		t.Fatal(err)
	}
	if got.Status != store.StatusFailed || got.Attempt != 3 || e.Code != wire.CodeOutcomeUnknown || !e.Retryable ||
		e.Unknown != wire.UnknownResetAfterSend || e.Status != http.StatusServiceUnavailable ||
		!strings.Contains(e.Message, "the lookup failed: answered 503") {
		t.Fatalf("call %+v error %+v; want failed at attempt 3, outcome_unknown reset_after_send, retryable, lookup 503", got, e)
	}
	if r := d.requests(); !reflect.DeepEqual(r, []string{"POST", "LOOKUP", "LOOKUP"}) {
		t.Fatalf("downstream saw %v; want one POST, then only lookups", r)
	}
	wantEvents(t, b.events(c.CallID), store.EventCreated, store.EventClaimed, store.EventOutcomeUnknown,
		store.EventRetryScheduled, store.EventClaimed, store.EventLookupFailed, store.EventRetryScheduled,
		store.EventClaimed, store.EventLookupFailed, store.EventFailed)

	d.mu.Lock()
	d.lookupStatus = 0
	d.mu.Unlock()
	if r := b.post("lookup-fails", payBody); r.status != http.StatusAccepted {
		t.Fatalf("same-key POST: %d %s; want 202 (reset)", r.status, r.body)
	}
	got = b.waitFinal(c.CallID)
	eff := tool.EffectID(c.CallID)
	if got.Status != store.StatusSucceeded || d.chargesOf(eff) != 1 {
		t.Fatalf("after the reset: %s with %d charges; want succeeded, one charge", got.Status, d.chargesOf(eff))
	}
	if r := d.requests(); !reflect.DeepEqual(r, []string{"POST", "LOOKUP", "LOOKUP", "LOOKUP"}) {
		t.Fatalf("downstream saw %v; want the reset to look up, not to charge", r)
	}
}

// resolve posts a resolve body for id.
func (b *bundle) resolve(id, body string) resp {
	b.t.Helper()
	return b.do(http.MethodPost, wire.ResolvePath(id), []byte(body), nil)
}

// heldCall makes a call of the hold tool whose answer is lost after the
// charge, and returns it held.
func heldCall(t *testing.T, b *bundle, d *keylessDownstream, key string) wire.Call {
	t.Helper()
	d.mu.Lock()
	d.drop, d.chargeBeforeDrop = 1, true
	d.mu.Unlock()
	c := b.post(key, payBody).call(t)
	got := b.waitFinal(c.CallID)
	var e wire.CallError
	if err := json.Unmarshal(got.Error, &e); err != nil {
		t.Fatal(err)
	}
	if got.Status != store.StatusFailed || got.Attempt != 1 || e.Code != wire.CodeOutcomeUnknown || e.Retryable ||
		e.Unknown != wire.UnknownResetAfterSend || !strings.Contains(e.Message, "held by on_unknown: hold") {
		t.Fatalf("held call %+v error %+v; want failed at attempt 1, outcome_unknown, not retryable", got, e)
	}
	return got
}

// TestHoldThenResolve: with on_unknown: hold the lost answer ends the call
// failed outcome_unknown, not retryable: a same-key POST returns it and
// sends nothing; GET ?code=outcome_unknown lists it. An operator resolves
// it through the API, both ways; afterwards the same key replays the
// settled outcome, and the audit says who resolved it.
func TestHoldThenResolve(t *testing.T) {
	t.Parallel()
	d := newKeylessDownstream(t)
	b := setup(t, func(c *Config) { c.Tools = unknownTools(t, d, toolreg.OnUnknownHold) })

	ok := heldCall(t, b, d, "held-ok")
	if r := b.post("held-ok", payBody); r.status != http.StatusOK || r.call(t).Status != store.StatusFailed {
		t.Fatalf("same-key POST of a held call: %d %s; want 200 with the failed call", r.status, r.body)
	}
	if r := d.requests(); !reflect.DeepEqual(r, []string{"POST"}) {
		t.Fatalf("downstream saw %v; want the one POST, nothing sent again", r)
	}
	var page wire.Page[wire.Call]
	if r := b.get("/v1/tool-calls?code=outcome_unknown"); r.status != http.StatusOK || json.Unmarshal(r.body, &page) != nil ||
		len(page.Calls) != 1 || page.Calls[0].CallID != ok.CallID {
		t.Fatalf("GET ?code=outcome_unknown: %d %s; want the held call", r.status, r.body)
	}

	r := b.resolve(ok.CallID, `{"outcome":"succeeded","result":{"id":"ch_1"}}`)
	got := r.call(t)
	eff := tool.EffectID(ok.CallID)
	if r.status != http.StatusOK || got.Status != store.StatusSucceeded || string(got.Result) != `{"id":"ch_1"}` ||
		got.EffectID == nil || *got.EffectID != eff || string(got.Error) != "null" {
		t.Fatalf("resolve succeeded: %d %s; want 200, succeeded with the result and effect %s", r.status, r.body, eff)
	}
	if rep := b.post("held-ok", payBody); rep.status != http.StatusOK || rep.header.Get(wire.HeaderIdempotentReplayed) != "true" ||
		string(rep.call(t).Result) != `{"id":"ch_1"}` {
		t.Fatalf("same key after resolve: %d %s; want the settled success replayed", rep.status, rep.body)
	}
	wantEvents(t, b.events(ok.CallID), store.EventCreated, store.EventClaimed, store.EventOutcomeUnknown,
		store.EventFailed, store.EventResolved)
	if s := b.stats(); s.Effects != 1 {
		t.Fatalf("%d effect rows, want 1", s.Effects)
	}

	bad := heldCall(t, b, d, "held-failed")
	r = b.resolve(bad.CallID, `{"outcome":"failed","message":"no charge in the ledger"}`)
	got = r.call(t)
	var e wire.CallError
	if err := json.Unmarshal(got.Error, &e); err != nil {
		t.Fatal(err)
	}
	if r.status != http.StatusOK || got.Status != store.StatusFailed || e.Code != wire.CodeResolvedFailed || e.Retryable ||
		e.Message != "no charge in the ledger" || got.EffectID != nil {
		t.Fatalf("resolve failed: %d %s; want 200, failed resolved_failed with the message, no effect", r.status, r.body)
	}
	if rep := b.post("held-failed", payBody); rep.status != http.StatusOK || !strings.Contains(string(rep.call(t).Error), wire.CodeResolvedFailed) {
		t.Fatalf("same key after resolve: %d %s; want the settled failure", rep.status, rep.body)
	}
	if r := d.requests(); len(r) != 2 {
		t.Fatalf("downstream saw %v; want one POST per call, nothing sent again", r)
	}
	if s := b.stats(); s.Effects != 1 {
		t.Fatalf("%d effect rows after a failed resolve, want still 1", s.Effects)
	}
}

// TestResolveRefused: only a failed outcome_unknown call can be resolved:
// a succeeded call, a known failure, a pending call are 409
// not_resolvable with the call unchanged; a bad body is 400; an unknown
// id is 404. None of them changes anything.
func TestResolveRefused(t *testing.T) {
	t.Parallel()
	d := newKeylessDownstream(t)
	b := setup(t, func(c *Config) { c.Tools = unknownTools(t, d, toolreg.OnUnknownHold) })
	done := b.waitFinal(b.post("done", payBody).call(t).CallID)
	known := b.waitFinal(b.post("known", `{"tool":"fail","args":{"retryable":false}}`).call(t).CallID)
	held := heldCall(t, b, d, "held")
	for _, c := range []wire.Call{done, known} {
		r := b.resolve(c.CallID, `{"outcome":"succeeded"}`)
		var body wire.Error
		if err := json.Unmarshal(r.body, &body); err != nil || r.status != http.StatusConflict ||
			body.Error.Code != wire.CodeNotResolvable || body.Call == nil || body.Call.Status != c.Status {
			t.Fatalf("resolve %s call: %d %s; want 409 not_resolvable with the call", c.Status, r.status, r.body)
		}
		after := b.get(wire.CallPath(c.CallID)).call(t)
		if after.Status != c.Status || string(after.Result) != string(c.Result) || string(after.Error) != string(c.Error) {
			t.Fatalf("refused resolve changed the call: %+v, was %+v", after, c)
		}
		for _, ev := range b.events(c.CallID) {
			if ev == store.EventResolved {
				t.Fatalf("refused resolve was audited: %v", b.events(c.CallID))
			}
		}
	}
	for _, body := range []string{`{}`, `{"outcome":"maybe"}`, `{"outcome":"failed","result":1}`,
		`{"outcome":"succeeded","result":[1]}`, `{"outcome":"succeeded","result":"text"}`,
		`{"outcome":"succeeded","message":"m"}`, `{"outcome":"succeeded","extra":1}`, `not json`} {
		if r := b.resolve(held.CallID, body); r.status != http.StatusBadRequest || r.errCode(t) != wire.CodeBadRequest {
			t.Fatalf("resolve %s: %d %s; want 400 bad_request", body, r.status, r.body)
		}
	}
	if r := b.resolve("c_00000000deadbeef", `{"outcome":"failed"}`); r.status != http.StatusNotFound || r.errCode(t) != wire.CodeNotFound {
		t.Fatalf("resolve of an unknown id: %d %s; want 404", r.status, r.body)
	}
	if after := b.get(wire.CallPath(held.CallID)).call(t); after.Status != store.StatusFailed || string(after.Error) != string(held.Error) {
		t.Fatalf("bad resolves changed the held call: %+v", after)
	}
}

// TestHoldAbandoned: a call whose attempt was abandoned in flight (here
// released as a dead owner's, before this server started) is held at its
// next claim without sending anything: failed outcome_unknown, case
// abandoned, not retryable.
func TestHoldAbandoned(t *testing.T) {
	t.Parallel()
	d := newKeylessDownstream(t)
	db := filepath.Join(t.TempDir(), "idem.db")
	st, err := sqlite.Open(t.Context(), db, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c, _, err := st.CreateOrGet(t.Context(), store.NewCall{CallID: "c_00000000000abcde", IdemKey: "abandoned",
		Fingerprint: strings.Repeat("ab", 32), Tool: "pay", ArgsJSON: json.RawMessage(`{"amount":5}`)})
	if err != nil {
		t.Fatal(err)
	}
	claimed, err := st.ClaimNext(t.Context(), "dead-owner", time.Hour, 1)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claim: %v %v", claimed, err)
	}
	if err := st.Release(t.Context(), store.LeaseOf(claimed[0]), "owner process gone"); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	b := setupOn(t, db, func(cfg *Config) { cfg.Tools = unknownTools(t, d, toolreg.OnUnknownHold) })
	got := b.waitFinal(c.CallID)
	var e wire.CallError
	if err := json.Unmarshal(got.Error, &e); err != nil {
		t.Fatal(err)
	}
	if got.Status != store.StatusFailed || got.Attempt != 2 || e.Code != wire.CodeOutcomeUnknown || e.Retryable ||
		e.Unknown != wire.UnknownAbandoned {
		t.Fatalf("call %+v error %+v; want failed at attempt 2, outcome_unknown abandoned, not retryable", got, e)
	}
	if r := d.requests(); len(r) != 0 {
		t.Fatalf("downstream saw %v; want nothing sent", r)
	}
	wantEvents(t, b.events(c.CallID), store.EventCreated, store.EventClaimed, store.EventOutcomeUnknown, store.EventRecover,
		store.EventClaimed, store.EventFailed)
}

// TestRetryDefaultSendsAgain: without on_unknown (retry, the default) the
// next attempt sends the request again with the same key and never looks
// up, even when the tool has a lookup block: against a downstream that
// ignores keys, that is a second charge (the contrast lookup and hold
// exist for).
func TestRetryDefaultSendsAgain(t *testing.T) {
	t.Parallel()
	d := newKeylessDownstream(t)
	d.drop, d.chargeBeforeDrop = 1, true
	reg, err := toolreg.Parse([]byte(`
tools:
  - name: pay
    kind: http
    url: `+d.url+`/charges
    lookup: {url: "`+d.url+`/charges?key={effect_id}"}
    retry: {max_attempts: 3, initial_backoff: 10ms, max_backoff: 20ms}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if tl, _ := reg.Lookup("pay"); tl.OnUnknown != toolreg.OnUnknownRetry {
		t.Fatalf("default on_unknown %q, want retry", tl.OnUnknown)
	}
	b := setup(t, func(c *Config) { c.Tools = reg })
	c := b.post("retry-default", payBody).call(t)
	got := b.waitFinal(c.CallID)
	if got.Status != store.StatusSucceeded || got.Attempt != 2 {
		t.Fatalf("call %s at attempt %d; want succeeded at attempt 2", got.Status, got.Attempt)
	}
	if r := d.requests(); !reflect.DeepEqual(r, []string{"POST", "POST"}) || d.chargesOf(tool.EffectID(c.CallID)) != 2 {
		t.Fatalf("downstream saw %v, %d charges; want two POSTs under one key and no lookup", r, d.chargesOf(tool.EffectID(c.CallID)))
	}
	wantEvents(t, b.events(c.CallID), store.EventCreated, store.EventClaimed, store.EventOutcomeUnknown,
		store.EventRetryScheduled, store.EventClaimed, store.EventSucceeded)
}

// TestResolveDeliversTheSettledState: a resolve is a new final state, so a
// call with a notify_url gets a second webhook delivery, carrying the
// settled call, besides the one of its held failure.
func TestResolveDeliversTheSettledState(t *testing.T) {
	t.Parallel()
	d := newKeylessDownstream(t)
	recv := newHookReceiver(t, func(int) int { return http.StatusOK })
	b := setup(t, func(c *Config) { c.Tools = unknownTools(t, d, toolreg.OnUnknownHold) },
		withWebhooks(t, recv.URL+"/hooks", "*="+recv.URL+"/hooks/calls"))
	held := heldCall(t, b, d, "held-hooked")
	eventually(t, "the held failure delivered", func() bool { return len(recv.deliveries()) == 1 })
	if r := b.resolve(held.CallID, `{"outcome":"succeeded","result":{"id":"ch_9"}}`); r.status != http.StatusOK {
		t.Fatalf("resolve: %d %s", r.status, r.body)
	}
	eventually(t, "the settled state delivered", func() bool { return len(recv.deliveries()) == 2 })
	got := recv.deliveries()
	var first, second wire.Call
	if json.Unmarshal(got[0].body, &first) != nil || json.Unmarshal(got[1].body, &second) != nil {
		t.Fatalf("delivery bodies: %s / %s", got[0].body, got[1].body)
	}
	if first.Status != store.StatusFailed || second.Status != store.StatusSucceeded || string(second.Result) != `{"id":"ch_9"}` {
		t.Fatalf("deliveries carry %s then %s (%s); want the held failure, then the settled success", first.Status, second.Status, second.Result)
	}
	if a, b2 := got[0].header.Get(wire.HeaderIdempotencyKey), got[1].header.Get(wire.HeaderIdempotencyKey); a == b2 {
		t.Fatalf("both deliveries under id %q; each final state has its own", a)
	}
}
