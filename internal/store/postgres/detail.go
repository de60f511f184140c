package postgres

import (
	"fmt"

	"github.com/idemctl/idemctl/internal/store"
)

// The audit detail of each event (SPEC §3: "detail holds the owner, effect
// id or reason"), worded exactly as the SQLite backend words it, so inspect
// tells the same story whichever database holds it:
//
//	created      the tool
//	claimed      the owner
//	succeeded    the effect id, or "no effect"
//	failed       "code: message" of the error
//	retry_reset  "after " + the failure it resets
//	recover      "lease expired (owner O, attempt N)", or Release's reason
//	fenced       "owner O attempt N refused: call is <status ...>"

// detailNoEffect is the succeeded detail of a call without a side effect.
const detailNoEffect = "no effect"

// detailClaimedSQL is the claimed detail as a SQL expression over
// ClaimNext's parameters: the owner ($1).
const detailClaimedSQL = `$1`

// detailRecoverSQL is the recover detail as a SQL expression over
// RecoverExpired's "recovered" rows (the owner and attempt whose lease
// lapsed).
const detailRecoverSQL = `'lease expired (owner ' || coalesce(owner, '') || ', attempt ' || attempt || ')'`

// detailFenced: the refused token and where the call stands now.
func detailFenced(comp store.Completion, cur store.Call) string {
	now := string(cur.Status)
	if cur.Owner != nil {
		now += fmt.Sprintf(" under owner %s attempt %d", *cur.Owner, cur.Attempt)
	} else {
		now += fmt.Sprintf(" at attempt %d", cur.Attempt)
	}
	return fmt.Sprintf("owner %s attempt %d refused: call is %s", comp.Owner, comp.Attempt, now)
}
