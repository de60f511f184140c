package httptool_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"testing"

	"github.com/idemctl/idemctl/internal/downstream"
	"github.com/idemctl/idemctl/internal/httptool"
	"github.com/idemctl/idemctl/internal/tool"
)

// TestRerunAgainstDemoDownstream: the same call run twice (a crash before
// the completion committed, then recovery) reaches a downstream that
// honours keys as one charge, both attempts getting the same answer; one
// that ignores keys charges twice. The executor is left out: this is the
// tool and the downstream only.
func TestRerunAgainstDemoDownstream(t *testing.T) {
	for _, ignore := range []bool{false, true} {
		ds := downstream.New(ignore)
		ts := httptest.NewServer(ds.Handler())
		ht, err := httptool.New(httptool.Config{Name: "create_refund", URL: ts.URL + "/refunds", Effect: true})
		if err != nil {
			t.Fatal(err)
		}
		var results []string
		for attempt := int64(1); attempt <= 2; attempt++ {
			out, err := ht.Run(context.Background(), tool.Invocation{CallID: "c_00000000000000bb", Tool: "create_refund",
				Attempt: attempt, Args: map[string]any{"amount": json.Number("5"), "_crash_before_commit": true}})
			if err != nil || out.Err != nil {
				t.Fatalf("attempt %d: %v %+v", attempt, err, out.Err)
			}
			results = append(results, string(out.Result))
		}
		ts.Close()
		ledger := ds.Ledger()
		if !ignore {
			if len(ledger) != 1 || ledger[0].Key != tool.EffectID("c_00000000000000bb") || results[0] != results[1] {
				t.Fatalf("keys honoured: ledger %+v, results %v", ledger, results)
			}
		} else if len(ledger) != 2 {
			t.Fatalf("keys ignored: ledger has %d charges, want 2", len(ledger))
		}
	}
}
