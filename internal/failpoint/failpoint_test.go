package failpoint_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/failpoint"
	"github.com/idemctl/idemctl/internal/store"
)

func TestParseNormalises(t *testing.T) {
	r, err := failpoint.Parse(" claim/before-commit = sleep(2s) ;create/after-commit=crash; succeed/before-commit=2*off->1*error->crash;")
	if err != nil {
		t.Fatal(err)
	}
	want := "create/after-commit=crash;claim/before-commit=sleep(2s);succeed/before-commit=2*off->1*error->crash"
	if got := r.String(); got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if got := r.Armed(); len(got) != 3 || got[0] != failpoint.CreateAfterCommit {
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
		_, err := failpoint.Parse(spec)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), failpoint.EnvVar) {
			t.Errorf("Parse(%q) = %v, want an error naming %s and containing %q", spec, err, failpoint.EnvVar, want)
		}
	}
}

// TestSequence: counted terms apply that many evaluations, then the next;
// once used up the point is off.
func TestSequence(t *testing.T) {
	r, err := failpoint.Parse("fail/before-commit=2*off->2*error")
	if err != nil {
		t.Fatal(err)
	}
	failpoint.Enable(r, nil)
	t.Cleanup(func() { failpoint.Enable(nil, nil) })
	var got []bool
	for range 6 {
		got = append(got, failpoint.Eval(failpoint.FailBeforeCommit) != nil)
	}
	want := []bool{false, false, true, true, false, false}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("errors by evaluation = %v, want %v", got, want)
		}
	}
	if err := failpoint.Eval(failpoint.CreateBeforeCommit); err != nil {
		t.Errorf("an unarmed point of an armed registry: %v", err)
	}
}

// TestErrorIsUnavailable: an injected error is what the server maps to 503
// and the executor retries.
func TestErrorIsUnavailable(t *testing.T) {
	r, err := failpoint.Parse("retry/after-commit=error")
	if err != nil {
		t.Fatal(err)
	}
	failpoint.Enable(r, nil)
	t.Cleanup(func() { failpoint.Enable(nil, nil) })
	err = failpoint.Eval(failpoint.RetryAfterCommit)
	if !errors.Is(err, store.ErrUnavailable) || !errors.Is(err, failpoint.ErrInjected) || !strings.Contains(err.Error(), string(failpoint.RetryAfterCommit)) {
		t.Errorf("Eval = %v, want ErrInjected (ErrUnavailable) naming the point", err)
	}
}

func TestSleep(t *testing.T) {
	r, err := failpoint.Parse("lease/after-commit=1*sleep(30ms)")
	if err != nil {
		t.Fatal(err)
	}
	failpoint.Enable(r, nil)
	t.Cleanup(func() { failpoint.Enable(nil, nil) })
	start := time.Now()
	if err := failpoint.Eval(failpoint.LeaseAfterCommit); err != nil {
		t.Fatal(err)
	}
	// A lower bound only: the sleep happened.
	if d := time.Since(start); d < 30*time.Millisecond {
		t.Errorf("slept %v, want at least 30ms", d)
	}
}

func TestDisabled(t *testing.T) {
	failpoint.Enable(nil, nil)
	if failpoint.Enabled() {
		t.Fatal("Enabled() with nothing armed")
	}
	for _, n := range failpoint.Names {
		if err := failpoint.Eval(n); err != nil {
			t.Errorf("Eval(%s) unarmed = %v", n, err)
		}
	}
}

// BenchmarkEvalDisabled: the cost of a point in production.
func BenchmarkEvalDisabled(b *testing.B) {
	failpoint.Enable(nil, nil)
	for b.Loop() {
		_ = failpoint.Eval(failpoint.SucceedBeforeCommit)
	}
}
