package postgres

import (
	"encoding/json"
	"fmt"

	"github.com/idemctl/idemctl/internal/store"
)

// The audit detail of each event (SPEC §3: "detail holds the owner, effect
// id or reason"), kept identical to the SQLite backend's so inspect shows
// the same story whichever database holds it.

// detailCreated: the tool the call runs.
func detailCreated(c store.Call) string { return c.Tool }

// detailRetryReset: why the call runs again.
func detailRetryReset(prev store.Call) string {
	return fmt.Sprintf("retryable failure at attempt %d; reset to pending by a same-key request", prev.Attempt)
}

// detailClaimedSQL is the claimed detail as a SQL expression over ClaimNext's
// parameters: the owner ($1).
const detailClaimedSQL = `$1`

// detailCompleted: for a success, the effect id (empty without an effect);
// for a failure, the error code and message.
func detailCompleted(c store.Call, comp store.Completion) string {
	if c.Status == store.StatusSucceeded {
		if comp.Effect != nil {
			return comp.Effect.EffectID
		}
		return ""
	}
	var e struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	if json.Unmarshal(comp.Error, &e) != nil || (e.Code == "" && e.Message == "") {
		return string(comp.Error)
	}
	return e.Code + ": " + e.Message
}

// detailFenced: the refused token and who holds the call now.
func detailFenced(comp store.Completion, status store.Status, cur store.Call) string {
	holder := string(cur.Status)
	if cur.Owner != nil {
		holder += " owner=" + *cur.Owner
	}
	return fmt.Sprintf("stale %s refused: owner=%s attempt=%d; call is %s attempt=%d",
		status, comp.Owner, comp.Attempt, holder, cur.Attempt)
}

// detailRecoverSQL is the recover detail of RecoverExpired as a SQL
// expression over its "expired" CTE: the owner whose lease lapsed.
const detailRecoverSQL = `'lease expired: owner=' || coalesce(owner, '') || ' attempt=' || attempt`
