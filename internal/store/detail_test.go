package store

import "testing"

// TestClaimOf: a claimed row and the created row of a call claimed at
// creation are claims, by their owners; a plain created row, and any other
// row whatever its detail, are not. CreatedTool reads the tool out of
// either created row.
func TestClaimOf(t *testing.T) {
	const owner = "vm~29a86ee4f680:1254:327415/1"
	for _, tc := range []struct {
		ev    AuditEvent
		owner string
		claim bool
		tool  string
	}{
		{AuditEvent{Event: EventClaimed, Detail: DetailClaimed(owner)}, owner, true, ""},
		{AuditEvent{Event: EventCreated, Detail: DetailCreatedClaimed("charge", owner)}, owner, true, "charge"},
		{AuditEvent{Event: EventCreated, Detail: DetailCreated("charge")}, "", false, "charge"},
		{AuditEvent{Event: EventRecover, Detail: DetailCreatedClaimed("charge", owner)}, "", false, ""},
		{AuditEvent{Event: EventCreated, Detail: "charge; claimed at creation by " + owner}, "", false, "charge"},
	} {
		got, ok := ClaimOf(tc.ev)
		if got != tc.owner || ok != tc.claim {
			t.Errorf("ClaimOf(%+v) = %q, %v; want %q, %v", tc.ev, got, ok, tc.owner, tc.claim)
		}
		if tool := CreatedTool(tc.ev); tool != tc.tool {
			t.Errorf("CreatedTool(%+v) = %q, want %q", tc.ev, tool, tc.tool)
		}
	}
	if d := DetailCreatedClaimed("charge", owner); d != "charge; claimed at creation by "+owner+" (attempt 1)" {
		t.Errorf("DetailCreatedClaimed = %q", d)
	}
}
