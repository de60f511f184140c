package failpoint_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/failpoint"
)

// known are the names the tests' registries accept (the store's, in
// production: store.Failpoints).
var known = []failpoint.Name{"create/before-commit", "create/after-commit", "claim/before-commit", "fail/before-commit", "succeed/before-commit", "retry/after-commit", "lease/after-commit"}

func TestParseNormalises(t *testing.T) {
	r, err := failpoint.Parse(" claim/before-commit = sleep(2s) ;create/after-commit=crash; succeed/before-commit=2*off->1*error->crash;", known)
	if err != nil {
		t.Fatal(err)
	}
	want := "create/after-commit=crash;claim/before-commit=sleep(2s);succeed/before-commit=2*off->1*error->crash"
	if got := r.String(); got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if got := r.Armed(); len(got) != 3 || got[0] != "create/after-commit" {
		t.Errorf("Armed() = %v", got)
	}
}

func TestParseRefusesBadSpecs(t *testing.T) {
	for spec, want := range map[string]string{
		"create/after-commit":                                 "want name=action",
		"create/after=crash":                                  `unknown failpoint "create/after"`,
		"create/after-commit=explode":                         `action "explode"`,
		"create/after-commit=0*crash":                         "positive integer",
		"create/after-commit=x*crash":                         "positive integer",
		"create/after-commit=sleep(soon)":                     "sleep: want a duration",
		"create/after-commit=crash;create/after-commit=error": "given twice",
	} {
		_, err := failpoint.Parse(spec, known)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), failpoint.EnvVar) {
			t.Errorf("Parse(%q) = %v, want an error naming %s and containing %q", spec, err, failpoint.EnvVar, want)
		}
	}
}

// TestSequence: counted terms apply that many evaluations, then the next;
// once used up the point is off.
func TestSequence(t *testing.T) {
	r, err := failpoint.Parse("fail/before-commit=2*off->2*error", known)
	if err != nil {
		t.Fatal(err)
	}
	var got []bool
	for range 6 {
		got = append(got, r.Eval("fail/before-commit") != nil)
	}
	want := []bool{false, false, true, true, false, false}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("errors by evaluation = %v, want %v", got, want)
		}
	}
	if err := r.Eval("create/before-commit"); err != nil {
		t.Errorf("an unarmed point of an armed registry: %v", err)
	}
}

// TestErrorNamesThePoint: an injected error is ErrInjected, naming its
// point.
func TestErrorNamesThePoint(t *testing.T) {
	r, err := failpoint.Parse("retry/after-commit=error", known)
	if err != nil {
		t.Fatal(err)
	}
	err = r.Eval("retry/after-commit")
	if !errors.Is(err, failpoint.ErrInjected) || !strings.Contains(err.Error(), "retry/after-commit") {
		t.Errorf("Eval = %v, want ErrInjected naming the point", err)
	}
}

func TestSleep(t *testing.T) {
	r, err := failpoint.Parse("lease/after-commit=1*sleep(30ms)", known)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := r.Eval("lease/after-commit"); err != nil {
		t.Fatal(err)
	}
	// A lower bound only: the sleep happened.
	if d := time.Since(start); d < 30*time.Millisecond {
		t.Errorf("slept %v, want at least 30ms", d)
	}
}

// TestNilRegistry: a nil registry (nothing armed) runs no point.
func TestNilRegistry(t *testing.T) {
	var r *failpoint.Registry
	for _, n := range known {
		if err := r.Eval(n); err != nil {
			t.Errorf("Eval(%s) on a nil registry = %v", n, err)
		}
	}
}

// BenchmarkEvalUnarmed: the cost of a point that is not armed.
func BenchmarkEvalUnarmed(b *testing.B) {
	r, err := failpoint.Parse("create/after-commit=error", known)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		_ = r.Eval("succeed/before-commit")
	}
}
