package sqlite

import (
	"strings"
	"testing"

	"github.com/idemctl/idemctl/internal/store"
)

// TestPurgeAndListPlans: the purge's pick reads idx_calls_final_updated in
// order (no sort of every final call, no scan), and a principal's listing
// reads idx_calls_principal_created backwards.
func TestPurgeAndListPlans(t *testing.T) {
	t.Parallel()
	s := openAt(t, tempPath(t), store.Options{})
	seed(t, s, 50)
	p := "alice"
	listSQL, listArgs := keysetQuery(store.ListFilter{Principal: &p, Limit: 10,
		After: &store.Cursor{CreatedAt: 1, CallID: "c_0000000000000001"}})
	for _, q := range []struct {
		name, sql, index string
		args             []any
	}{
		{"purge pick", sqlPurgePick, "idx_calls_final_updated", []any{1.0, 500}},
		{"principal listing", listSQL, "idx_calls_principal_created", listArgs},
	} {
		plan := strings.Join(queryPlan(t, s, q.sql, q.args...), "\n")
		t.Logf("%s:\n%s", q.name, plan)
		if !strings.Contains(plan, q.index) || strings.Contains(plan, "TEMP B-TREE") || strings.Contains(plan, "SCAN calls\n") {
			t.Errorf("%s plan:\n%s\nwant a read of %s in order, no sort", q.name, plan, q.index)
		}
	}
}
