package server

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestParseOwner(t *testing.T) {
	cases := []struct {
		in   string
		want ownerID
		ok   bool
	}{
		{"vm:123:456", ownerID{"vm", 123, 456}, true},
		{"vm:123:456/3", ownerID{"vm", 123, 456}, true},
		{"host.example.com:1:0/w1", ownerID{"host.example.com", 1, 0}, true},
		{"a:b:1:2", ownerID{"a:b", 1, 2}, true}, // only the last two fields are numbers
		{"8123:617", ownerID{}, false},          // the chapter's pid:thread form
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
	root := t.TempDir()
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
	self, err := p.self()
	if err != nil {
		t.Skipf("no /proc here: %v", err)
	}
	if self.PID != os.Getpid() || self.Start == 0 || self.Host == "" {
		t.Fatalf("self %+v", self)
	}
	if _, gone := p.ownerGone(self, self.String()+"/1"); gone {
		t.Fatal("this process judged gone")
	}
}
