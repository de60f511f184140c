package redrive_test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/redrive"
	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/store/sqlite"
)

// bundle is a store with failed calls made by fail.
type bundle struct {
	t  *testing.T
	st store.Store
	n  int
}

func setup(t *testing.T) *bundle {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "idem.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return &bundle{t: t, st: st}
}

// fail records a call of principal and tool and fails it with errJSON;
// it returns the call id.
func (b *bundle) fail(principal, tool, errJSON string) string {
	b.t.Helper()
	ctx := b.t.Context()
	b.n++
	id := fmt.Sprintf("c_%016x", b.n)
	if _, _, err := b.st.CreateOrGet(ctx, store.NewCall{CallID: id, Principal: principal, IdemKey: fmt.Sprintf("k%d", b.n),
		Fingerprint: "fp", Tool: tool, ArgsJSON: json.RawMessage(`{}`)}); err != nil {
		b.t.Fatal(err)
	}
	claimed, err := b.st.ClaimNext(ctx, "w", time.Minute, 1)
	if err != nil || len(claimed) != 1 || claimed[0].CallID != id {
		b.t.Fatalf("claim %s: %v, %v", id, claimed, err)
	}
	if _, err := b.st.Fail(ctx, store.Completion{Lease: store.LeaseOf(claimed[0]), Error: json.RawMessage(errJSON)}); err != nil {
		b.t.Fatal(err)
	}
	return id
}

func ids(cs []store.Call) []string {
	out := []string{}
	for _, c := range cs {
		out = append(out, c.CallID)
	}
	slices.Sort(out)
	return out
}

const (
	retryableErr = `{"code":"downstream_error","message":"502","retryable":true}`
	definiteErr  = `{"code":"downstream_rejected","message":"400","retryable":false}`
	unknownErr   = `{"code":"outcome_unknown","message":"held","retryable":true}`
)

// TestSelection: by default only retryable failures of the principal, the
// tool, the code and the window are selected; --force adds definite
// failures; an outcome_unknown call is never selected; a dry run changes
// nothing.
func TestSelection(t *testing.T) {
	b := setup(t)
	ctx := t.Context()
	retry := b.fail("alice", "charge", retryableErr)
	definite := b.fail("alice", "charge", definiteErr)
	b.fail("alice", "charge", unknownErr) // never selected
	otherTool := b.fail("alice", "email", retryableErr)
	bobs := b.fail("bob", "charge", retryableErr)
	otherCode := b.fail("alice", "charge", `{"code":"downstream_timeout","retryable":true}`)
	alice := "alice"

	for _, tc := range []struct {
		name string
		f    redrive.Filter
		want []string
	}{
		{"default", redrive.Filter{Principal: &alice}, []string{retry, otherTool, otherCode}},
		{"tool", redrive.Filter{Principal: &alice, Tool: "charge"}, []string{retry, otherCode}},
		{"code", redrive.Filter{Principal: &alice, Code: "downstream_error"}, []string{retry, otherTool}},
		{"force", redrive.Filter{Principal: &alice, Tool: "charge", Force: true}, []string{retry, definite, otherCode}},
		{"force never unknown", redrive.Filter{Principal: &alice, Code: "outcome_unknown", Force: true}, []string{}},
		{"every principal", redrive.Filter{Tool: "charge", Code: "downstream_error"}, []string{retry, bobs}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.f.DryRun = true
			if err := tc.f.Check(); err != nil {
				t.Fatal(err)
			}
			res, err := redrive.Run(ctx, b.st, tc.f, "alice")
			slices.Sort(tc.want)
			if err != nil || !slices.Equal(ids(res.Calls), tc.want) || res.More {
				t.Fatalf("selected %v (more %v), %v; want %v", ids(res.Calls), res.More, err, tc.want)
			}
		})
	}
	// The dry runs changed nothing.
	st, err := b.st.Stats(ctx)
	if err != nil || st.ByStatus[store.StatusFailed] != 6 {
		t.Fatalf("after dry runs: %v, %v; want 6 failed", st.ByStatus, err)
	}
}

// TestRedriveResets: a redrive resets the selected calls to pending,
// audited redriven with who did it, and no others; the limit holds and
// More says there are more; the window selects by creation time.
func TestRedriveResets(t *testing.T) {
	b := setup(t)
	ctx := t.Context()
	for range 5 {
		b.fail("", "charge", retryableErr)
	}
	f := redrive.Filter{Limit: 3}
	if err := f.Check(); err != nil {
		t.Fatal(err)
	}
	res, err := redrive.Run(ctx, b.st, f, "ops")
	if err != nil || len(res.Calls) != 3 || !res.More {
		t.Fatalf("redrive limit 3 = %d calls, more %v, %v; want 3 and more", len(res.Calls), res.More, err)
	}
	for _, c := range res.Calls {
		got, err := b.st.GetAny(ctx, c.CallID)
		if err != nil || got.Status != store.StatusPending || c.Status != store.StatusPending {
			t.Fatalf("%s after redrive: %s, %v; want pending", c.CallID, got.Status, err)
		}
		evs, err := b.st.Audit(ctx, c.CallID, 0)
		if err != nil || evs[len(evs)-1].Event != store.EventRedriven || evs[len(evs)-1].Detail != "by ops after downstream_error: 502" {
			t.Fatalf("%s audit: %+v, %v; want redriven by ops", c.CallID, evs[len(evs)-1], err)
		}
	}
	st, _ := b.st.Stats(ctx)
	if st.ByStatus[store.StatusPending] != 3 || st.ByStatus[store.StatusFailed] != 2 {
		t.Fatalf("by status %v; want 3 pending, 2 failed", st.ByStatus)
	}
	// A window that ends before every call selects none.
	past := 1.0
	res, err = redrive.Run(ctx, b.st, redrive.Filter{Until: &past, Limit: 10}, "ops")
	if err != nil || len(res.Calls) != 0 {
		t.Fatalf("until 1970 = %v, %v; want none", ids(res.Calls), err)
	}
	future := float64(time.Now().Add(time.Hour).Unix())
	res, err = redrive.Run(ctx, b.st, redrive.Filter{Since: &future, Limit: 10}, "ops")
	if err != nil || len(res.Calls) != 0 {
		t.Fatalf("since an hour ahead = %v, %v; want none", ids(res.Calls), err)
	}
}

// TestCheck: limits out of range and empty windows are refused.
func TestCheck(t *testing.T) {
	one, two := 1.0, 2.0
	for _, f := range []redrive.Filter{{Limit: -1}, {Limit: redrive.MaxLimit + 1}, {Since: &two, Until: &one}, {Since: &one, Until: &one}} {
		if err := f.Check(); err == nil {
			t.Errorf("Check(%+v) passed", f)
		}
	}
	f := redrive.Filter{}
	if err := f.Check(); err != nil || f.Limit != redrive.DefaultLimit {
		t.Fatalf("Check(zero) = %v, limit %d", err, f.Limit)
	}
}
