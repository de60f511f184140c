package executor

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
)

// ownerID identifies the process holding a lease: the host it runs on, its
// pid, and its start time. The owner column holds it followed by
// "/<instance>", the number of the Server inside that process (tests and
// benches run several). It does not name a worker: all workers of one
// server claim under the same owner (the scheduler claims for them in one
// batch), and what tells two claims of a call apart is the attempt, the
// fencing token. The start time is what makes the identity safe to
// act on: pids are reused, so "host:pid" alone could name a new, unrelated
// process (or a later idemctl) and a dead owner's call would look held
// forever — or a live owner's call would look abandoned.
type ownerID struct {
	// Host is the host identity (see hostID), not merely the hostname: a
	// pid is only meaningful to processes that share Host.
	Host string
	PID  int
	// Start is field 22 of /proc/<pid>/stat: the process start time in clock
	// ticks since boot. Together with PID it is unique on a host until reboot.
	Start uint64
}

// String renders the identity as stored in calls.owner: "host:pid:start".
func (o ownerID) String() string {
	return o.Host + ":" + strconv.Itoa(o.PID) + ":" + strconv.FormatUint(o.Start, 10)
}

// parseOwner parses an owner column value: "host:pid:start", optionally
// followed by "/suffix" (the server instance inside the process; older
// owners may carry another suffix, which is ignored). It is
// parsed from the right because only the host is free text. Owners written by
// anything else (or by older versions) do not parse; their calls are left to
// lease expiry.
func parseOwner(s string) (ownerID, bool) {
	if i := strings.IndexByte(s, '/'); i >= 0 {
		s = s[:i]
	}
	j := strings.LastIndexByte(s, ':')
	if j < 0 {
		return ownerID{}, false
	}
	start, err := strconv.ParseUint(s[j+1:], 10, 64)
	if err != nil {
		return ownerID{}, false
	}
	s = s[:j]
	k := strings.LastIndexByte(s, ':')
	if k <= 0 {
		return ownerID{}, false
	}
	pid, err := strconv.Atoi(s[k+1:])
	if err != nil || pid <= 0 {
		return ownerID{}, false
	}
	return ownerID{Host: s[:k], PID: pid, Start: start}, true
}

// procFS reads process information from a /proc tree; tests point it at a
// fake one.
type procFS struct {
	root string // "/proc"
}

var errNoProcFS = errors.New("process start time unavailable (no /proc)")

// maxInstanceHost bounds an explicit instance host; it is stored in every
// running call's owner column.
const maxInstanceHost = 200

// checkInstanceHost validates an explicit host identity (--instance-host):
// visible ASCII without '/', which separates the executor suffix of an
// owner.
func checkInstanceHost(h string) error {
	if h == "" || len(h) > maxInstanceHost {
		return fmt.Errorf("instance host must be 1 to %d characters, got %d", maxInstanceHost, len(h))
	}
	for _, r := range h {
		if r <= ' ' || r > '~' || r == '/' {
			return fmt.Errorf("instance host %q: only visible ASCII characters other than '/' are allowed", h)
		}
	}
	return nil
}

// hostID is the default host identity: the hostname, for people, plus a
// short hash of the boot id and the pid namespace, for the machine.
//
// Why: dead-owner recovery releases a call at once when its owner names this
// host and that pid is gone, and a pid means something only inside one pid
// namespace during one boot. Two machines or containers with the same
// hostname sharing one PostgreSQL database must never judge each other's
// pids (they would release live calls), so their identities must differ even
// when their hostnames do not. Processes restarted in the same namespace keep
// the identity and still recover their predecessor's calls at once; after a
// reboot or in a new container the old calls wait for their lease instead —
// the safe side. Containers sharing a pid namespace share the identity, which
// is right: they see each other's processes.
//
// If the boot id or the namespace cannot be read, the identity is returned
// with an error: the caller must then not judge other owners.
func (p procFS) hostID() (string, error) {
	name, err := os.Hostname()
	if err != nil || name == "" {
		return "", fmt.Errorf("hostname: %w", err)
	}
	// '/' would end the host early when the owner is parsed back.
	name = strings.ReplaceAll(name, "/", "_")
	boot, bootErr := os.ReadFile(p.root + "/sys/kernel/random/boot_id")
	ns, nsErr := os.Readlink(p.root + "/self/ns/pid") // "pid:[4026531836]"
	sum := sha256.Sum256([]byte(strings.TrimSpace(string(boot)) + "\x00" + ns))
	id := name + "~" + hex.EncodeToString(sum[:6])
	if err := errors.Join(bootErr, nsErr); err != nil {
		return id, fmt.Errorf("host identity (boot id, pid namespace): %w", err)
	}
	return id, nil
}

// self returns this process's identity. host, if not empty, is used as the
// host identity instead of hostID (the operator vouches that it names this
// pid namespace alone). Without /proc (not Linux) the start time is unknown;
// on any error dead-owner recovery must stay off.
func (p procFS) self(host string) (ownerID, error) {
	var hostErr error
	if host == "" {
		host, hostErr = p.hostID()
	}
	pid := os.Getpid()
	st, err := p.stat(pid)
	if err != nil {
		return ownerID{Host: host, PID: pid}, errors.Join(hostErr, err)
	}
	return ownerID{Host: host, PID: pid, Start: st.start}, hostErr
}

type procStat struct {
	state byte   // field 3: R, S, D, Z (zombie), X (dead), ...
	start uint64 // field 22: starttime in clock ticks since boot
}

// stat reads /proc/<pid>/stat. A missing file means no such process.
func (p procFS) stat(pid int) (procStat, error) {
	data, err := os.ReadFile(p.root + "/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return procStat{}, err
		}
		return procStat{}, fmt.Errorf("%w: %v", errNoProcFS, err)
	}
	return parseProcStat(string(data))
}

// parseProcStat extracts the state and starttime of a /proc/<pid>/stat line.
// Field 2 (comm) is parenthesized and may itself contain spaces and ')', so
// fields are counted from the last ')'.
func parseProcStat(line string) (procStat, error) {
	end := strings.LastIndexByte(line, ')')
	if end < 0 {
		return procStat{}, fmt.Errorf("malformed /proc stat line")
	}
	rest := strings.Fields(line[end+1:]) // rest[0] is field 3 (state)
	const startField = 22 - 3
	if len(rest) <= startField || len(rest[0]) != 1 {
		return procStat{}, fmt.Errorf("malformed /proc stat line: %d fields after comm", len(rest))
	}
	start, err := strconv.ParseUint(rest[startField], 10, 64)
	if err != nil {
		return procStat{}, fmt.Errorf("malformed /proc stat starttime: %w", err)
	}
	return procStat{state: rest[0][0], start: start}, nil
}

// livenessCertain reports whether this process sees every process of its
// pid namespace in /proc, so that a missing /proc/<pid> really means "no
// such process". When it cannot be sure it answers false with the reason,
// and dead-owner recovery must stay off: a /proc mounted with hidepid=2 or
// hidepid=invisible (also what systemd's ProtectProc=invisible mounts) hides
// other users' processes, so a live instance running as another user would
// look dead and its call would be run a second time, in parallel.
//
// Two checks, both required: the mount options of the proc filesystem at
// the root (read from self/mountinfo; any hidepid other than 0/off, and a
// mountinfo that cannot be read or names no proc mount there, count as
// uncertain), and a probe that pid 1 — the namespace's init, owned by
// another user in every unprivileged service — is visible.
func (p procFS) livenessCertain() (bool, string) {
	data, err := os.ReadFile(p.root + "/self/mountinfo")
	if err != nil {
		return false, fmt.Sprintf("cannot read %s/self/mountinfo to check for hidepid: %v", p.root, err)
	}
	var opts []string
	found := false
	for _, line := range strings.Split(string(data), "\n") {
		// mountinfo(5): id parent major:minor root mountpoint options
		// [optional fields...] - fstype source super-options
		fields := strings.Fields(line)
		sep := slices.Index(fields, "-")
		if sep < 6 || len(fields) < sep+4 || fields[4] != p.root || fields[sep+1] != "proc" {
			continue
		}
		// The last mount at the mount point is the one in force.
		found = true
		opts = append(strings.Split(fields[5], ","), strings.Split(fields[sep+3], ",")...)
	}
	if !found {
		return false, fmt.Sprintf("no proc filesystem mounted at %s", p.root)
	}
	for _, o := range opts {
		if v, ok := strings.CutPrefix(o, "hidepid="); ok && v != "0" && v != "off" {
			return false, fmt.Sprintf("%s is mounted with hidepid=%s: processes of other users may be invisible", p.root, v)
		}
	}
	if _, err := p.stat(1); err != nil {
		return false, fmt.Sprintf("pid 1 is not visible in %s (%v): processes of other users may be hidden", p.root, err)
	}
	return true, ""
}

// ownerGone reports whether owner is a process with this host identity
// (self.Host, see hostID) that certainly no longer runs: its pid is gone, now belongs to a process started
// at another time (pid reuse), or is a zombie (exited, not yet reaped — its
// tools no longer run). Anything uncertain — another host, an unparsable
// owner, an unreadable /proc — answers false: a live lease is never taken on
// a guess, and lease expiry still recovers the call. A missing /proc/<pid>
// is only trustworthy when livenessCertain holds; the caller checks that
// once, at start.
func (p procFS) ownerGone(self ownerID, owner string) (ownerID, bool) {
	o, ok := parseOwner(owner)
	if !ok || o.Host != self.Host || self.Start == 0 {
		return o, false
	}
	if o.PID == self.PID && o.Start == self.Start {
		return o, false // this very process: its own executors hold the lease
	}
	st, err := p.stat(o.PID)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return o, true
	case err != nil:
		return o, false
	}
	return o, st.start != o.Start || st.state == 'Z' || st.state == 'X'
}
