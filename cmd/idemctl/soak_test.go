package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/exitcode"
	"github.com/idemctl/idemctl/internal/server/servertest"
	"github.com/idemctl/idemctl/internal/soak"
	"github.com/idemctl/idemctl/internal/store/postgres/pgtest"
)

func TestSoakRefusesBadFlagCombinations(t *testing.T) {
	t.Parallel()
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--instances", "3"}, "needs PostgreSQL"},
		{[]string{"--db", "x.db", "--pg-faults"}, "need PostgreSQL"},
		{[]string{"--pg-restart-cmd", "true"}, "need PostgreSQL"},
		{[]string{"--base", "http://127.0.0.1:1", "--db", "x.db"}, "--db configures the servers soak runs itself"},
		{[]string{"--base", "http://127.0.0.1:1", "--instances", "2"}, "--instances configures"},
		{[]string{"--base", "ftp://x"}, "absolute http://"},
		{[]string{"--min-gap", "2s", "--max-gap", "1s"}, "--min-gap ≤ --max-gap"},
		{[]string{"--cycles", "-1"}, "--cycles must be 0 or more"},
		{[]string{"--db", "mysql://x"}, "unknown database scheme"},
		{[]string{"--pg-partition"}, "need PostgreSQL"},
		{[]string{"--pauses", "--pause-min", "2s"}, "a pause must outlast the lease"},
		{[]string{"--pauses", "--lease", "5s"}, "a pause must outlast the lease"},
		{[]string{"--pauses", "--pause-min", "4s", "--pause-max", "3s"}, "--pause-min ≤ --pause-max"},
		{[]string{"--db", "postgres://h/d", "--pg-partition", "--partition-min", "0s"}, "0 < --partition-min ≤ --partition-max"},
		{[]string{"--base", "http://127.0.0.1:1", "--pauses"}, "--pauses configures"},
		{[]string{"--base", "http://127.0.0.1:1", "--pg-partition"}, "--pg-partition configures"},
	}
	for _, tc := range cases {
		out, errOut, code := cliRun(t, append([]string{"soak"}, tc.args...)...)
		if code != exitcode.Usage || !strings.Contains(errOut, tc.want) || out != "" {
			t.Errorf("soak %v: exit %d, stderr %q, stdout %q; want exit 2 with %q", tc.args, code, errOut, out, tc.want)
		}
	}
}

// soakChecks are the checks every passing soak with servers of its own
// reports as PASS (sqlite_integrity only on SQLite).
var soakChecks = []string{"acknowledged_not_lost", "one_call_per_key", "at_most_one_effect", "effect_iff_succeeded",
	"final_after_drain", "same_payload_never_409", "different_payload_409", "no_5xx_while_up",
	"ledger_one_charge_per_effect", "no_unplanned_exit", "downstream_same_key", "downstream_one_effect"}

// assertSoakPassed checks the verdict, every check's PASS line, and that
// the run inflicted the faults its seed planned, kind by kind.
func assertSoakPassed(t *testing.T, out, errOut string, code int, seed uint64, kinds []soak.FaultKind, cycles int, extra ...string) {
	t.Helper()
	if code != exitcode.OK || !strings.Contains(out, "PASS soak: seed ") || strings.Contains(out, "\nFAIL ") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	for _, name := range append(soakChecks, extra...) {
		if !strings.Contains(out, "\nPASS "+name+": ") {
			t.Errorf("no PASS line for %s:\n%s", name, out)
		}
	}
	planned := map[soak.FaultKind]int{}
	g := soak.NewFaultGenerator(seed, kinds, time.Millisecond, time.Millisecond)
	for range cycles {
		planned[g.Next().Kind]++
	}
	// Whether a crash hook's exit was seen depends on timing (a kill may
	// take its call first), so only the faults inflicted are compared.
	want := fmt.Sprintf("faults=%d: kills=%d  crash hooks=%d (exits with status 3: ",
		cycles, planned[soak.FaultKill], planned[soak.FaultCrashHook])
	want2 := fmt.Sprintf(")  pg-terminate=%d  pg-restart=%d;", planned[soak.FaultPGTerminate], planned[soak.FaultPGRestart])
	if !strings.Contains(out, want) || !strings.Contains(out, want2) || planned[soak.FaultKill] == 0 {
		t.Fatalf("want %q…%q (the seed's plan) in:\n%s", want, want2, out)
	}
	if planned[soak.FaultPause]+planned[soak.FaultPartition] > 0 {
		want3 := fmt.Sprintf("pauses=%d (", planned[soak.FaultPause])
		want4 := fmt.Sprintf(")  pg-partitions=%d (", planned[soak.FaultPartition])
		if !strings.Contains(out, "\n"+want3) || !strings.Contains(out, want4) {
			t.Fatalf("want %q…%q (the seed's plan) in:\n%s", want3, want4, out)
		}
	}
}

// seedWith finds a seed whose first n faults from kinds hold at least
// least of each of want.
func seedWith(t *testing.T, kinds []soak.FaultKind, n, least int, want ...soak.FaultKind) uint64 {
	t.Helper()
	for seed := uint64(1); seed < 10000; seed++ {
		g := soak.NewFaultGenerator(seed, kinds, time.Millisecond, time.Millisecond)
		got := map[soak.FaultKind]int{}
		for range n {
			got[g.Next().Kind]++
		}
		ok := true
		for _, k := range want {
			ok = ok && got[k] >= least
		}
		if ok {
			return seed
		}
	}
	t.Fatalf("no seed with %d of each of %v in %d faults", least, want, n)
	return 0
}

// TestSoakPostgresPausesAndPartitions is the CI soak of the faults the
// design was made for: three servers on one schema, instances frozen past
// their lease while they run tools, and instances cut off from the
// database by their proxies (short partitions: CI time), besides kills and
// crash hooks. Every check passes, and the pause check judged at least one
// call that was taken over while its worker was frozen.
func TestSoakPostgresPausesAndPartitions(t *testing.T) {
	db := pgtest.New(t) // skips without IDEMCTL_TEST_POSTGRES_URL
	bin := servertest.Binary(t)
	kinds := soak.FaultKinds(false, false, soak.FaultPause, soak.FaultPartition)
	const cycles = 12
	seed := seedWith(t, kinds, cycles, 2, soak.FaultPause, soak.FaultPartition)
	out, errOut, code := cliRun(t, "soak", "--binary", bin, "--db", db.URL, "--instances", "3", "--pauses", "--pause-min", "5s", "--pause-max", "6s", "--pg-partition",
		"--partition-min", "5s", "--partition-max", "6s", "--cycles", strconv.Itoa(cycles), "--min-gap", "100ms", "--max-gap", "500ms",
		"--clients", "6", "--seed", strconv.FormatUint(seed, 10), "--drain-timeout", "60s")
	assertSoakPassed(t, out, errOut, code, seed, kinds, cycles,
		"paused_completion_fenced", "partition_answered_in_bound", "partition_service_resumes")
	m := regexp.MustCompile(`\nPASS paused_completion_fenced: .* \((\d+) checked\)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("paused_completion_fenced did not pass:\n%s", out)
	}
	if m[1] == "0" {
		// Every pause freezes its instance while a sleep call it was sent
		// runs (internal/soak's bait), so the lapsed lease is taken over.
		t.Fatalf("no call frozen by a pause was judged (taken over, then fenced):\n%s", out)
	}
	if !regexp.MustCompile(`SIGSTOP instance \d \(pid \d+\) for [\d.]+s, past its 2s lease`).MatchString(out) ||
		!regexp.MustCompile(`partition: instance \d's database connections blackholed for 5\.\d+s`).MatchString(out) ||
		!regexp.MustCompile(`instance \d cut off: /readyz 503 Service Unavailable`).MatchString(out) {
		t.Fatalf("the narration does not show the pauses and partitions:\n%s", out)
	}
}

// TestSoakSQLite is the CI soak on SQLite: 20 faults on one server.
func TestSoakSQLite(t *testing.T) {
	t.Parallel()
	bin := servertest.Binary(t)
	out, errOut, code := cliRun(t, "soak", "--binary", bin, "--cycles", "20", "--min-gap", "100ms", "--max-gap", "500ms",
		"--clients", "6", "--seed", "20", "--drain-timeout", "60s")
	assertSoakPassed(t, out, errOut, code, 20, soak.FaultKinds(false, false), 20, "sqlite_integrity")
	assertGatesUsed(t, out)
}

// assertGatesUsed: the workload's guarded tools (send_email rate-limited,
// fail breaker-guarded) went through their gates: each has its row.
func assertGatesUsed(t *testing.T, out string) {
	t.Helper()
	m := regexp.MustCompile(`gates \(database\): (.*)`).FindStringSubmatch(out)
	if m == nil || !strings.Contains(m[1], "fail breaker=") || !strings.Contains(m[1], "send_email breaker=") {
		t.Fatalf("the gates of fail and send_email are not in the figures:\n%s", out)
	}
	t.Log(m[0])
}

// TestSoakPostgresThreeInstances is the CI soak on PostgreSQL: three
// servers on one schema, 20 faults including ended database connections.
// The restart command only records that it ran (this test must not restart
// a PostgreSQL that other tests use): it exercises the fault's path, the
// command and the wait for the database, not a real restart.
func TestSoakPostgresThreeInstances(t *testing.T) {
	db := pgtest.New(t) // skips without IDEMCTL_TEST_POSTGRES_URL
	bin := servertest.Binary(t)
	ran := filepath.Join(t.TempDir(), "restarts")
	out, errOut, code := cliRun(t, "soak", "--binary", bin, "--db", db.URL, "--instances", "3", "--pg-faults",
		"--pg-restart-cmd", "echo restart >> "+ran, "--cycles", "20", "--min-gap", "100ms", "--max-gap", "500ms",
		"--clients", "6", "--seed", "21", "--drain-timeout", "60s")
	assertSoakPassed(t, out, errOut, code, 21, soak.FaultKinds(true, true), 20)
	assertGatesUsed(t, out)
	if !strings.Contains(out, "SKIP sqlite_integrity") {
		t.Fatalf("integrity_check on PostgreSQL?\n%s", out)
	}
	m := regexp.MustCompile(`pg-restart=(\d+);`).FindStringSubmatch(out)
	b, _ := os.ReadFile(ran)
	if m == nil || m[1] == "0" || strings.Count(string(b), "restart\n") != atoi(t, m[1]) {
		t.Fatalf("the restart command ran %d time(s), the figures say %v:\n%s", strings.Count(string(b), "restart\n"), m, out)
	}
	if !regexp.MustCompile(`pg_terminate_backend: [1-9]\d* backend\(s\) of application_name ` + regexp.QuoteMeta(db.App) + ` ended`).MatchString(out) {
		t.Fatalf("no connection of the servers (application_name %s) was ended:\n%s", db.App, out)
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// crashHookSeed finds a seed whose first n faults hold a crash hook: the
// fault that runs an http call twice across a crash.
func crashHookSeed(t *testing.T, n int) uint64 {
	for seed := uint64(1); seed < 1000; seed++ {
		g := soak.NewFaultGenerator(seed, soak.FaultKinds(false, false), time.Millisecond, time.Millisecond)
		for range n {
			if g.Next().Kind == soak.FaultCrashHook {
				return seed
			}
		}
	}
	t.Fatal("no seed with a crash hook")
	return 0
}

// TestSoakCatchesADownstreamIgnoringKeys: a broken setup must fail the
// soak. The demo downstream started with --ignore-keys charges again when
// a crash hook makes the server rerun an http call; the ledger check must
// name that call, and soak exit 1 with the seed.
func TestSoakCatchesADownstreamIgnoringKeys(t *testing.T) {
	t.Parallel()
	bin := servertest.Binary(t)
	seed := crashHookSeed(t, 3)
	out, errOut, code := cliRun(t, "soak", "--binary", bin, "--cycles", "3", "--min-gap", "100ms", "--max-gap", "300ms",
		"--clients", "4", "--seed", strconv.FormatUint(seed, 10), "--downstream-ignore-keys")
	if code != exitcode.Failed || !strings.Contains(out, "\nFAIL ledger_one_charge_per_effect: ") ||
		!regexp.MustCompile(`\nFAIL downstream_one_effect: [^\n]*\n(  [^\n]*\n)*  soak-\d+-\w+-crash-\d+: 2 charges in the ledger for one call`).MatchString(out) ||
		!regexp.MustCompile(`-crash-\d+: call c_\w+ \(effect eff_\w+\) has 2 charge\(s\) in the ledger`).MatchString(out) ||
		!strings.Contains(errOut, "seed "+strconv.FormatUint(seed, 10)) ||
		!strings.Contains(out, "FAIL soak: seed "+strconv.FormatUint(seed, 10)+"; replay: idemctl soak ") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
}

// TestSoakAgainstABase runs the workload against a server the test runs:
// no kills, the checks the API allows, the others skipped with a reason.
func TestSoakAgainstABase(t *testing.T) {
	t.Parallel()
	bin := servertest.Binary(t)
	srv := servertest.StartServe(t, bin, "--db", t.TempDir()+"/idem.db", "--log-level", "warn")
	out, errOut, code := cliRun(t, "soak", "--base", srv.URL, "--cycles", "10", "--min-gap", "50ms", "--max-gap", "150ms", "--clients", "4")
	if code != exitcode.OK || !strings.Contains(out, "PASS soak: seed ") || strings.Contains(out, "faults=") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	for _, name := range []string{"acknowledged_not_lost", "effect_iff_succeeded", "final_after_drain", "same_payload_never_409", "different_payload_409", "no_5xx_while_up"} {
		if !strings.Contains(out, "\nPASS "+name+": ") {
			t.Errorf("no PASS line for %s", name)
		}
	}
	for _, name := range []string{"at_most_one_effect", "ledger_one_charge_per_effect", "sqlite_integrity", "no_unplanned_exit"} {
		if !strings.Contains(out, "\nSKIP "+name+": ") {
			t.Errorf("no SKIP line for %s", name)
		}
	}
	if t.Failed() {
		t.Log(out)
	}
}

// TestSoakNeverPrintsTheDatabasePassword: a server that cannot start on a
// PostgreSQL DSN is an error (exit 4) that quotes the serve command line,
// with the password redacted there and everywhere else.
func TestSoakNeverPrintsTheDatabasePassword(t *testing.T) {
	t.Parallel()
	bin := servertest.Binary(t)
	// With --pg-partition the servers' DSN points at the proxies: a DSN of
	// its own per instance, redacted all the same.
	for _, extra := range [][]string{nil, {"--pg-partition"}} {
		args := append([]string{"soak", "--binary", bin, "--db", "postgres://soak:s3cr3t-pw@127.0.0.1:1/nowhere?sslmode=disable", "--cycles", "1"}, extra...)
		out, errOut, code := cliRun(t, args...)
		if code != exitcode.Error || !strings.Contains(errOut, "exited before serving") || !strings.Contains(out+errOut, "soak:xxxxx@127.0.0.1:") {
			t.Fatalf("%v: exit %d\nstdout:\n%s\nstderr:\n%s", extra, code, out, errOut)
		}
		if strings.Contains(out+errOut, "s3cr3t-pw") {
			t.Fatalf("%v: the password was printed:\n%s\n%s", extra, out, errOut)
		}
	}
}
