package reconcile

import (
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/idemctl/idemctl/internal/wire"
)

// Grace is how much earlier than the window idemctl's side is read. A
// record made in the window may belong to a call created before it (its
// attempts and retries take time), or to an effect stamped a little
// before it by a database clock that runs ahead of the downstream's.
// Records are matched against the effects and calls of the window and
// the grace before it; only effects of the window itself are reported
// missing downstream.
const Grace = time.Hour

// Effect is one effect row of the tool here.
type Effect struct {
	EffectID string    `json:"effect_id"`
	CallID   string    `json:"call_id"`
	At       time.Time `json:"at"`
}

// Call is one call of the tool here.
type Call struct {
	CallID   string      `json:"call_id"`
	EffectID string      `json:"effect_id"` // the key its attempts send
	Status   wire.Status `json:"status"`
	// Code is a failed call's error code ("" otherwise).
	Code string `json:"code,omitempty"`
}

// Local is idemctl's side of one tool: its effects and calls since the
// window's start less Grace.
type Local struct {
	Effects []Effect
	Calls   []Call
}

// Unmatched is a downstream record with no effect here.
type Unmatched struct {
	Record
	// Call is the call whose effect id the key is, if there is one here
	// (a call that failed, or is still in flight); nil: none.
	Call *Call `json:"call,omitempty"`
}

// Shared is a key that several downstream records were made with: the
// downstream did not honour it.
type Shared struct {
	Key     string            `json:"key"`
	Records []json.RawMessage `json:"records"`
	// CallID is the call whose effect id the key is ("" if none here).
	CallID string `json:"call_id,omitempty"`
}

// Held is a call that ended with outcome_unknown, and what the downstream
// says about its effect.
type Held struct {
	CallID   string `json:"call_id"`
	EffectID string `json:"effect_id"`
	// Records is how many downstream records carry its effect id: 0, the
	// effect did not happen; 1, it did; more, it happened several times.
	Records int `json:"downstream_records"`
}

// Report is the verdict of one reconciliation.
type Report struct {
	Tool    string    `json:"tool"`
	Since   time.Time `json:"since"`
	Records int       `json:"downstream_records"`
	Effects int       `json:"effects"`
	// NoEffect: downstream records with no effect here.
	NoEffect []Unmatched `json:"records_without_effect"`
	// NoRecord: effects here (of the window) with no downstream record.
	NoRecord []Effect `json:"effects_without_record"`
	// SharedKeys: keys that several downstream records share.
	SharedKeys []Shared `json:"shared_keys"`
	// Held: calls that ended outcome_unknown, with what the downstream
	// says about each.
	Held []Held `json:"held"`
	// Agree is true when all four lists are empty.
	Agree bool `json:"agree"`
}

// Compare judges the downstream's records (listed since then) against
// idemctl's side. Each list of the report is in a stable order: records
// as listed, effects and held calls by time then id.
func Compare(tool string, since time.Time, records []Record, local Local) Report {
	rep := Report{Tool: tool, Since: since.UTC(), Records: len(records),
		NoEffect: []Unmatched{}, NoRecord: []Effect{}, SharedKeys: []Shared{}, Held: []Held{}}
	effects := map[string]Effect{}
	for _, e := range local.Effects {
		effects[e.EffectID] = e
	}
	calls := map[string]Call{}
	for _, c := range local.Calls {
		calls[c.EffectID] = c
	}
	byKey := map[string][]Record{}
	var keyOrder []string
	for _, r := range records {
		if r.Key != "" {
			if len(byKey[r.Key]) == 0 {
				keyOrder = append(keyOrder, r.Key)
			}
			byKey[r.Key] = append(byKey[r.Key], r)
		}
	}

	held := map[string]bool{}
	for _, c := range local.Calls {
		if c.Status == wire.StatusFailed && c.Code == wire.CodeOutcomeUnknown {
			held[c.EffectID] = true
			rep.Held = append(rep.Held, Held{CallID: c.CallID, EffectID: c.EffectID, Records: len(byKey[c.EffectID])})
		}
	}
	for _, r := range records {
		if _, ok := effects[r.Key]; ok && r.Key != "" {
			continue
		}
		if held[r.Key] && r.Key != "" {
			continue // reported with its held call
		}
		u := Unmatched{Record: r}
		if c, ok := calls[r.Key]; ok && r.Key != "" {
			u.Call = &c
		}
		rep.NoEffect = append(rep.NoEffect, u)
	}
	for _, e := range local.Effects {
		if e.At.Before(since) {
			continue // read to match records only
		}
		rep.Effects++
		if len(byKey[e.EffectID]) == 0 {
			rep.NoRecord = append(rep.NoRecord, e)
		}
	}
	for _, k := range keyOrder {
		rs := byKey[k]
		if len(rs) < 2 {
			continue
		}
		s := Shared{Key: k}
		for _, r := range rs {
			s.Records = append(s.Records, r.Record)
		}
		if c, ok := calls[k]; ok {
			s.CallID = c.CallID
		} else if e, ok := effects[k]; ok {
			s.CallID = e.CallID
		}
		rep.SharedKeys = append(rep.SharedKeys, s)
	}
	slices.SortFunc(rep.NoRecord, func(a, b Effect) int {
		if c := a.At.Compare(b.At); c != 0 {
			return c
		}
		return strings.Compare(a.EffectID, b.EffectID)
	})
	slices.SortFunc(rep.Held, func(a, b Held) int { return strings.Compare(a.CallID, b.CallID) })
	rep.Agree = len(rep.NoEffect) == 0 && len(rep.NoRecord) == 0 && len(rep.SharedKeys) == 0 && len(rep.Held) == 0
	return rep
}
