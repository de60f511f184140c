package executor

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/idemctl/idemctl/internal/store"
)

func TestParseOwner(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in   string
		want ownerID
		ok   bool
	}{
		{"vm:123:456", ownerID{"vm", 123, 456}, true},
		{"vm:123:456/3", ownerID{"vm", 123, 456}, true},
		{"host.example.com:1:0/w1", ownerID{"host.example.com", 1, 0}, true},
		{"a:b:1:2", ownerID{"a:b", 1, 2}, true}, // only the last two fields are numbers
		{"8123:617", ownerID{}, false},          // a pid:thread form, not an owner
		{":1:2", ownerID{}, false},
		{"vm:x:2", ownerID{}, false},
		{"vm:0:2", ownerID{}, false},
		{"vm:1:-2", ownerID{}, false},
		{"", ownerID{}, false},
	}
	for _, tc := range cases {
		got, ok := parseOwner(tc.in)
		if ok != tc.ok || (ok && got != tc.want) {
			t.Errorf("parseOwner(%q) = %+v %v, want %+v %v", tc.in, got, ok, tc.want, tc.ok)
		}
		if ok && !strings.HasPrefix(tc.in, got.String()) {
			t.Errorf("String() of %q = %q", tc.in, got.String())
		}
	}
}

func TestParseProcStat(t *testing.T) {
	t.Parallel()
	// comm may contain spaces and parentheses: fields count from the last ')'.
	line := "4242 (we ird) (name) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 12345 678 18446744073709551615\n"
	st, err := parseProcStat(line)
	if err != nil || st.state != 'S' || st.start != 987654 {
		t.Fatalf("got %+v %v, want state S start 987654", st, err)
	}
	if _, err := parseProcStat("4242 (short) S 1 2"); err == nil {
		t.Fatal("short line accepted")
	}
	if _, err := parseProcStat("no parens"); err == nil {
		t.Fatal("line without comm accepted")
	}
}

// fakeProc builds a /proc tree with the given pid → (state, start).
func fakeProc(t *testing.T, procs map[int][2]string) procFS {
	t.Helper()
	return fakeProcAt(t, t.TempDir(), procs)
}

// fakeProcAt is fakeProc in a given directory.
func fakeProcAt(t *testing.T, root string, procs map[int][2]string) procFS {
	t.Helper()
	for pid, p := range procs {
		dir := filepath.Join(root, strconv.Itoa(pid))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		line := strconv.Itoa(pid) + " (idemctl) " + p[0] + " 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 " + p[1] + " 0 0\n"
		if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(line), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return procFS{root: root}
}

func TestOwnerGone(t *testing.T) {
	t.Parallel()
	proc := fakeProc(t, map[int][2]string{
		10: {"S", "1000"}, // self
		20: {"S", "2000"}, // a live other process
		30: {"Z", "3000"}, // exited, not reaped
		40: {"R", "4444"}, // pid 40 now belongs to a newer process
	})
	self := ownerID{Host: "h", PID: 10, Start: 1000}
	cases := []struct {
		owner string
		gone  bool
	}{
		{"h:10:1000/1", false}, // this process
		{"h:10:1000/7", false}, // another executor of this process
		{"h:20:2000/1", false}, // alive
		{"h:30:3000/1", true},  // zombie
		{"h:40:4000/1", true},  // pid reused
		{"h:50:5000/1", true},  // no such pid
		{"other:50:5000/1", false},
		{"8123:617", false}, // unparsable: wait for the lease
		{"h:20:2000", false},
	}
	for _, tc := range cases {
		if _, gone := proc.ownerGone(self, tc.owner); gone != tc.gone {
			t.Errorf("ownerGone(%q) = %v, want %v", tc.owner, gone, tc.gone)
		}
	}
	// Without a known start time of its own, a server never judges others.
	if _, gone := proc.ownerGone(ownerID{Host: "h", PID: 10}, "h:50:5000/1"); gone {
		t.Error("judged an owner without knowing its own start time")
	}
}

func TestSelfIdentity(t *testing.T) {
	p := procFS{root: "/proc"}
	self, err := p.self("")
	if err != nil {
		t.Skipf("no /proc here: %v", err)
	}
	if self.PID != os.Getpid() || self.Start == 0 || self.Host == "" {
		t.Fatalf("self %+v", self)
	}
	if _, gone := p.ownerGone(self, self.String()+"/1"); gone {
		t.Fatal("this process judged gone")
	}
	// The host identity is the hostname plus a hash, and stable within
	// the process (every executor and restart in this namespace agrees).
	name, _ := os.Hostname()
	if !strings.HasPrefix(self.Host, name+"~") {
		t.Fatalf("host %q does not start with hostname %q", self.Host, name+"~")
	}
	again, err := p.self("")
	if err != nil || again.Host != self.Host {
		t.Fatalf("host identity not stable: %q then %q (%v)", self.Host, again.Host, err)
	}
	if o, ok := parseOwner(self.String() + "/1"); !ok || o != self {
		t.Fatalf("owner %q parses as %+v %v", self.String()+"/1", o, ok)
	}
}

// selfHost is this process's host identity, as a server in it would write
// into calls.owner.
func selfHost(t *testing.T) string {
	t.Helper()
	self, err := procFS{root: "/proc"}.self("")
	if err != nil {
		t.Skipf("no /proc here: %v", err)
	}
	return self.Host
}

// fakeHost adds the boot id and pid namespace of a fake /proc.
func fakeHost(t *testing.T, root, bootID, pidNS string) {
	t.Helper()
	if bootID != "" {
		dir := filepath.Join(root, "sys", "kernel", "random")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "boot_id"), []byte(bootID+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if pidNS != "" {
		dir := filepath.Join(root, "self", "ns")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		// A dangling symlink, like the real one: only its text matters.
		if err := os.Symlink(pidNS, filepath.Join(dir, "pid")); err != nil {
			t.Fatal(err)
		}
	}
}

// TestHostIDSeparatesMachinesAndNamespaces: same hostname, another boot
// (machine) or another pid namespace (container) → another host identity,
// so neither can release the other's live calls.
func TestHostIDSeparatesMachinesAndNamespaces(t *testing.T) {
	t.Parallel()
	id := func(bootID, pidNS string) string {
		t.Helper()
		root := t.TempDir()
		fakeHost(t, root, bootID, pidNS)
		h, err := procFS{root: root}.hostID()
		if err != nil {
			t.Fatalf("hostID(%s, %s): %v", bootID, pidNS, err)
		}
		return h
	}
	const boot1, boot2 = "aee5817e-7aab-4030-b1af-1db85ff83f54", "0c0ffee0-0000-4000-8000-000000000001"
	const ns1, ns2 = "pid:[4026531836]", "pid:[4026532201]"
	base := id(boot1, ns1)
	name, _ := os.Hostname()
	if !strings.HasPrefix(base, strings.ReplaceAll(name, "/", "_")+"~") || len(base) != len(name)+1+12 {
		t.Fatalf("host identity %q: want %q + \"~\" + 12 hex", base, name)
	}
	if again := id(boot1, ns1); again != base {
		t.Fatalf("same boot and namespace gave %q and %q", base, again)
	}
	if other := id(boot2, ns1); other == base {
		t.Fatalf("another machine (boot id) has the same identity %q", other)
	}
	if other := id(boot1, ns2); other == base {
		t.Fatalf("another pid namespace has the same identity %q", other)
	}

	// Either part missing: an identity for the owner column, but an error,
	// so the server does not judge other owners on it.
	for _, tc := range []struct{ boot, ns string }{{boot1, ""}, {"", ns1}} {
		root := t.TempDir()
		fakeHost(t, root, tc.boot, tc.ns)
		if h, err := (procFS{root: root}).hostID(); err == nil || h == "" {
			t.Errorf("boot %q ns %q: got %q, %v; want an identity and an error", tc.boot, tc.ns, h, err)
		}
	}
}

// TestSelfInstanceHostOverride: an explicit instance host replaces the
// derived identity and needs neither boot id nor namespace.
func TestSelfInstanceHostOverride(t *testing.T) {
	root := t.TempDir()
	proc := fakeProcAt(t, root, map[int][2]string{os.Getpid(): {"R", "777"}})
	self, err := proc.self("node-a")
	if err != nil || self.Host != "node-a" || self.Start != 777 || self.PID != os.Getpid() {
		t.Fatalf("self(node-a) = %+v, %v", self, err)
	}
	// Without boot id and namespace the derived identity is incomplete.
	if _, err := proc.self(""); err == nil {
		t.Fatal("derived identity without boot id and pid namespace accepted")
	}
	fakeHost(t, root, "b", "pid:[1]")
	derived, err := proc.self("")
	if err != nil || !strings.Contains(derived.Host, "~") {
		t.Fatalf("derived identity %+v, %v", derived, err)
	}

	// Only owners with exactly this host are judged: same pid under a
	// different instance host is someone else's pid.
	ghost := strconv.Itoa(1<<30) + ":1/1" // no such pid
	if _, gone := proc.ownerGone(ownerID{Host: "node-a", PID: 10, Start: 1}, "node-a:"+ghost); !gone {
		t.Error("dead owner of the same instance host not recognised")
	}
	if _, gone := proc.ownerGone(ownerID{Host: "node-a", PID: 10, Start: 1}, "node-b:"+ghost); gone {
		t.Error("owner of another instance host judged")
	}
	// An owner written before host identities (plain hostname) is never
	// judged by a server with a derived identity: it waits for its lease.
	name, _ := os.Hostname()
	judge := ownerID{Host: derived.Host, PID: 10, Start: 1}
	if _, gone := proc.ownerGone(judge, name+":"+ghost); gone {
		t.Error("old-format owner judged")
	}
	// The same dead pid under the derived identity is judged: the refusal
	// above is the format's doing, not an unreadable /proc.
	if _, gone := proc.ownerGone(judge, derived.Host+":"+ghost); !gone {
		t.Error("dead owner of the derived identity not recognised")
	}
}

func TestCheckInstanceHost(t *testing.T) {
	for _, ok := range []string{"node-a", "vm.example.com", "10.0.0.7", "a:b", strings.Repeat("x", maxInstanceHost)} {
		if err := checkInstanceHost(ok); err != nil {
			t.Errorf("checkInstanceHost(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", "a/b", "a b", "tab\t", "é", strings.Repeat("x", maxInstanceHost+1)} {
		if err := checkInstanceHost(bad); err == nil {
			t.Errorf("checkInstanceHost(%q) accepted", bad)
		}
	}
	// New never touches the store; a nil interface inside stands for one.
	nop := Deps{Store: struct{ store.Store }{}}
	if _, err := New(Config{InstanceHost: "a/b"}, nop); err == nil {
		t.Error("New accepted instance host a/b")
	}
	srv, err := New(Config{InstanceHost: "node-x"}, nop)
	if err != nil || !strings.HasPrefix(srv.Owner(), "node-x:"+strconv.Itoa(os.Getpid())+":") {
		t.Errorf("owner with --instance-host node-x: %q, %v", srv.Owner(), err)
	}
}

// fakeMountinfo writes root/self/mountinfo: a root filesystem, then the
// given lines (use procMount for the proc filesystem at root).
func fakeMountinfo(t *testing.T, root string, lines ...string) {
	t.Helper()
	dir := filepath.Join(root, "self")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	all := append([]string{"1 0 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw"}, lines...)
	if err := os.WriteFile(filepath.Join(dir, "mountinfo"), []byte(strings.Join(all, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// procMount is a mountinfo line for a proc filesystem at mountPoint with
// the given super options.
func procMount(mountPoint, superOpts string) string {
	return "22 1 0:21 / " + mountPoint + " rw,nosuid,nodev,noexec,relatime shared:12 - proc proc " + superOpts
}

// TestLivenessCertain: dead-owner recovery is trusted only with a proc
// mount without hidepid and a visible pid 1.
func TestLivenessCertain(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		mounts func(root string) []string // nil: no mountinfo file
		pid1   bool
		want   bool
		reason string
	}{
		{"plain proc", func(r string) []string { return []string{procMount(r, "rw")} }, true, true, ""},
		{"hidepid=0", func(r string) []string { return []string{procMount(r, "rw,hidepid=0")} }, true, true, ""},
		{"hidepid=off", func(r string) []string { return []string{procMount(r, "rw,hidepid=off")} }, true, true, ""},
		{"hidepid=2", func(r string) []string { return []string{procMount(r, "rw,hidepid=2")} }, true, false, "hidepid=2"},
		{"hidepid=invisible", func(r string) []string { return []string{procMount(r, "rw,hidepid=invisible,subset=pid")} }, true, false, "hidepid=invisible"},
		{"hidepid=1", func(r string) []string { return []string{procMount(r, "rw,hidepid=1")} }, true, false, "hidepid=1"},
		{"later mount with hidepid shadows", func(r string) []string {
			return []string{procMount(r, "rw"), strings.Replace(procMount(r, "rw,hidepid=invisible"), "22 1", "40 1", 1)}
		}, true, false, "hidepid=invisible"},
		{"proc mounted elsewhere only", func(r string) []string { return []string{procMount(r+"-other", "rw")} }, true, false, "no proc filesystem"},
		{"no mountinfo", nil, true, false, "mountinfo"},
		{"pid 1 hidden", func(r string) []string { return []string{procMount(r, "rw")} }, false, false, "pid 1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			procs := map[int][2]string{}
			if tc.pid1 {
				procs[1] = [2]string{"S", "1"}
			}
			proc := fakeProcAt(t, root, procs)
			if tc.mounts != nil {
				fakeMountinfo(t, root, tc.mounts(root)...)
			}
			got, reason := proc.livenessCertain()
			if got != tc.want || !strings.Contains(reason, tc.reason) || (got && reason != "") {
				t.Fatalf("livenessCertain() = %v %q, want %v with a reason mentioning %q", got, reason, tc.want, tc.reason)
			}
		})
	}
}
