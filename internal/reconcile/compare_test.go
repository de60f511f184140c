package reconcile

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/wire"
)

// TestCompareWindow: an effect from before the window is read only to
// match a record: it is never reported without record; records without a
// key never make a shared key, and each is reported without effect.
func TestCompareWindow(t *testing.T) {
	t.Parallel()
	since := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	rec := func(key string) Record { return Record{Key: key, Record: json.RawMessage(`{}`)} }
	local := Local{
		Effects: []Effect{
			{EffectID: "eff_early", CallID: "c_1", At: since.Add(-time.Minute)}, // its record was made in the window
			{EffectID: "eff_old", CallID: "c_2", At: since.Add(-30 * time.Minute)},
			{EffectID: "eff_in", CallID: "c_3", At: since.Add(time.Minute)},
		},
		Calls: []Call{{CallID: "c_4", EffectID: "eff_run", Status: wire.StatusRunning}},
	}
	rep := Compare("t", since, []Record{rec("eff_early"), rec("eff_in"), rec(""), rec(""), rec("eff_run")}, local)
	if rep.Effects != 1 || len(rep.NoRecord) != 0 {
		t.Errorf("effects %d, without record %+v; want 1 and none (eff_old is before the window)", rep.Effects, rep.NoRecord)
	}
	if len(rep.SharedKeys) != 0 {
		t.Errorf("records without a key made a shared key: %+v", rep.SharedKeys)
	}
	if len(rep.NoEffect) != 3 || rep.NoEffect[0].Key != "" || rep.NoEffect[1].Key != "" ||
		rep.NoEffect[2].Call == nil || rep.NoEffect[2].Call.Status != wire.StatusRunning {
		t.Errorf("without effect: %+v; want the two keyless records and eff_run with its running call", rep.NoEffect)
	}
	if rep.Agree {
		t.Error("agree with records without effect")
	}
	if rep := Compare("t", since, []Record{rec("eff_in")}, Local{Effects: local.Effects[2:]}); !rep.Agree {
		t.Errorf("one record, its effect: %+v", rep)
	}
}
