package soak

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

func ops(seed uint64, client, n int, withHTTP bool) []Op {
	g := NewGenerator(seed, client, withHTTP)
	out := make([]Op, n)
	for i := range out {
		out[i] = g.Next()
	}
	return out
}

func faults(seed uint64, n int) []Fault {
	g := NewFaultGenerator(seed, FaultKinds(true, true), 10*time.Millisecond, time.Second)
	out := make([]Fault, n)
	for i := range out {
		out[i] = g.Next()
	}
	return out
}

// TestPlanSameSeedSamePlan: the same seed gives the same operations for
// every client and the same fault schedule; another seed, or another
// client, another stream.
func TestPlanSameSeedSamePlan(t *testing.T) {
	for client := range 3 {
		a, b := ops(42, client, 500, true), ops(42, client, 500, true)
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("client %d: two generators with seed 42 differ", client)
		}
		if reflect.DeepEqual(a, ops(43, client, 500, true)) {
			t.Fatalf("client %d: seeds 42 and 43 gave the same operations", client)
		}
	}
	if reflect.DeepEqual(ops(42, 0, 100, true), ops(42, 1, 100, true)) {
		t.Fatal("clients 0 and 1 share a stream")
	}
	if !reflect.DeepEqual(faults(42, 200), faults(42, 200)) {
		t.Fatal("two fault generators with seed 42 differ")
	}
	if reflect.DeepEqual(faults(42, 200), faults(43, 200)) {
		t.Fatal("seeds 42 and 43 gave the same fault schedule")
	}
	// The gaps change the timing only: the same seed with other gaps
	// inflicts the same faults on the same instances.
	a := NewFaultGenerator(42, FaultKinds(true, false), time.Millisecond, time.Millisecond)
	b := NewFaultGenerator(42, FaultKinds(true, false), time.Millisecond, time.Hour)
	for range 200 {
		fa, fb := a.Next(), b.Next()
		if fa.Kind != fb.Kind || fa.Instance != fb.Instance {
			t.Fatalf("other gaps, other faults: %+v vs %+v", fa, fb)
		}
	}
}

// TestPlanMix: the stream holds every operation kind, every tool (the http
// tool only when asked for), slow and failing calls, one-shot and waiting
// requests; faults stay within the gaps and draw every kind asked for.
func TestPlanMix(t *testing.T) {
	kinds := map[OpKind]int{}
	tools := map[string]int{}
	var once, wait int
	for _, op := range ops(7, 0, 2000, true) {
		kinds[op.Kind]++
		tools[op.Payload.Tool]++
		if op.Once {
			once++
		}
		if op.Wait {
			wait++
		}
	}
	for _, k := range []OpKind{OpNew, OpRetry, OpConflict} {
		if kinds[k] == 0 {
			t.Errorf("no %s operation in 2000", k)
		}
	}
	for _, tool := range []string{ToolCharge, ToolEmail, ToolSleep, ToolFail, HTTPTool, LookupTool} {
		if tools[tool] == 0 {
			t.Errorf("no %s call in 2000", tool)
		}
	}
	if once == 0 || wait == 0 {
		t.Errorf("once=%d wait=%d", once, wait)
	}
	for _, op := range ops(7, 0, 2000, false) {
		if httpTool(op.Payload.Tool) {
			t.Fatal("an http tool drawn without a downstream")
		}
	}
	seen := map[FaultKind]bool{}
	for _, f := range faults(9, 300) {
		seen[f.Kind] = true
		if f.Gap < 10*time.Millisecond || f.Gap > time.Second {
			t.Fatalf("gap %s outside [10ms, 1s]", f.Gap)
		}
	}
	for _, k := range FaultKinds(true, true) {
		if !seen[k] {
			t.Errorf("no %s fault in 300", k)
		}
	}
}

// TestOtherPayloadDiffers: a conflict's payload differs from the key's own
// for every tool.
func TestOtherPayloadDiffers(t *testing.T) {
	for _, op := range ops(11, 0, 300, true) {
		a, _ := json.Marshal(op.Payload)
		b, _ := json.Marshal(Other(op.Payload))
		if string(a) == string(b) {
			t.Fatalf("Other(%s) is the same payload", a)
		}
	}
}
