package server

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/wire"
)

// redrive sends POST /v1/redrive with body as principal's token ("" for
// none) and decodes a 200.
func (b *bundle) redrive(token, body string) (resp, wire.Redriven[wire.Call]) {
	b.t.Helper()
	h := map[string]string{}
	if token != "" {
		h["Authorization"] = bearer(token)
	}
	r := b.do(http.MethodPost, wire.PathRedrive, []byte(body), h)
	var out wire.Redriven[wire.Call]
	if r.status == http.StatusOK {
		if err := json.Unmarshal(r.body, &out); err != nil {
			b.t.Fatalf("redrive answer: %v: %s", err, r.body)
		}
	}
	return r, out
}

func redrivenIDs(out wire.Redriven[wire.Call]) []string {
	ids := []string{}
	for _, c := range out.Calls {
		ids = append(ids, c.CallID)
	}
	slices.Sort(ids)
	return ids
}

func sorted(ids ...string) []string { slices.Sort(ids); return ids }

// TestRedriveRoute: POST /v1/redrive selects only the token's principal's
// failed calls, retryable ones unless force, by tool; a dry run changes
// nothing; a redrive sends each back to pending through the same-key
// reset, so it runs again with its attempts continued and its
// fingerprint unchanged, audited redriven with the principal; a bad body
// is 400 and changes nothing.
func TestRedriveRoute(t *testing.T) {
	b, _ := setupAuth(t)
	post := func(token, key, body string) wire.Call {
		t.Helper()
		r := b.post(key, body, "Authorization", bearer(token))
		return b.waitFinalAs(token, r.call(t).CallID)
	}
	retry := post(aliceToken, "r", `{"tool":"fail","args":{"times":1,"retryable":true}}`)
	definite := post(aliceToken, "d", `{"tool":"fail","args":{"times":1,"retryable":false}}`)
	post(aliceToken, "ok", `{"tool":"charge","args":{"amount":1}}`)
	bobs := post(bobToken, "r", `{"tool":"fail","args":{"times":1,"retryable":true}}`)
	if retry.Status != store.StatusFailed || definite.Status != store.StatusFailed || bobs.Status != store.StatusFailed {
		t.Fatalf("setup: %s %s %s, want three failed calls", retry.Status, definite.Status, bobs.Status)
	}

	for _, tc := range []struct {
		body string
		want []string
	}{
		{`{"dry_run":true}`, sorted(retry.CallID)},
		{`{"dry_run":true,"force":true}`, sorted(retry.CallID, definite.CallID)},
		{`{"dry_run":true,"force":true,"tool":"charge"}`, sorted()},
		{`{"dry_run":true,"code":"tool_failed","force":true}`, sorted(retry.CallID, definite.CallID)},
	} {
		r, out := b.redrive(aliceToken, tc.body)
		if r.status != http.StatusOK || !out.DryRun || !slices.Equal(redrivenIDs(out), tc.want) || out.More {
			t.Fatalf("redrive %s: %d %s; want %v", tc.body, r.status, r.body, tc.want)
		}
	}
	for _, c := range []wire.Call{retry, definite} {
		if got := b.getAs(aliceToken, c.CallID); got.Status != store.StatusFailed {
			t.Fatalf("%s after dry runs: %s, want failed", c.CallID, got.Status)
		}
	}

	for _, bad := range []string{`{"limit":5000}`, `{"nope":1}`, `[1]`, `{"since":2,"until":1}`, `{} {}`} {
		if r, _ := b.redrive(aliceToken, bad); r.status != http.StatusBadRequest || r.errCode(t) != wire.CodeBadRequest {
			t.Fatalf("redrive %s: %d %s; want 400 bad_request", bad, r.status, r.body)
		}
	}
	if r, _ := b.redrive("", `{}`); r.status != http.StatusUnauthorized {
		t.Fatalf("redrive without a token: %d, want 401", r.status)
	}

	r, out := b.redrive(aliceToken, ``)
	if r.status != http.StatusOK || out.DryRun || !slices.Equal(redrivenIDs(out), []string{retry.CallID}) || out.Calls[0].Status != store.StatusPending {
		t.Fatalf("redrive: %d %s; want %s back to pending", r.status, r.body, retry.CallID)
	}
	again := b.waitFinalAs(aliceToken, retry.CallID)
	if again.Status != store.StatusSucceeded || again.Attempt != retry.Attempt+1 || again.Fingerprint != retry.Fingerprint {
		t.Fatalf("redriven call ended %s at attempt %d (fingerprint %s); want succeeded at %d, fingerprint %s",
			again.Status, again.Attempt, again.Fingerprint, retry.Attempt+1, retry.Fingerprint)
	}
	rows, err := b.st.Audit(t.Context(), retry.CallID, 0)
	if err != nil {
		t.Fatal(err)
	}
	var detail string
	for _, row := range rows {
		if row.Event == store.EventRedriven {
			detail = row.Detail
		}
	}
	if want := store.DetailRedriven("alice", retry.Error); detail != want {
		t.Fatalf("redriven audit detail %q, want %q", detail, want)
	}
	// Bob's failure and Alice's definite one were not touched.
	if got := b.getAs(bobToken, bobs.CallID); got.Status != store.StatusFailed {
		t.Fatalf("bob's call after alice's redrive: %s, want failed", got.Status)
	}
	if got := b.getAs(aliceToken, definite.CallID); got.Status != store.StatusFailed {
		t.Fatalf("definite failure after a redrive without force: %s, want failed", got.Status)
	}
}

// getAs reads a call with token.
func (b *bundle) getAs(token, callID string) wire.Call {
	b.t.Helper()
	r := b.get(wire.CallPath(callID), "Authorization", bearer(token))
	if r.status != http.StatusOK {
		b.t.Fatalf("GET %s: %d %s", callID, r.status, r.body)
	}
	return r.call(b.t)
}

// waitFinalAs polls GET with token until the call is final.
func (b *bundle) waitFinalAs(token, callID string) wire.Call {
	b.t.Helper()
	var last wire.Call
	eventually(b.t, "call "+callID+" reaches a final state", func() bool {
		last = b.getAs(token, callID)
		return last.Status.Final()
	})
	return last
}
