package soak

import (
	"sort"
	"sync"
	"time"

	"github.com/idemctl/idemctl/internal/wire"
)

// Variant says which payload an attempt carried for its key.
type Variant int

// The variants.
const (
	// Same is the key's own payload (the one its first request carried).
	Same Variant = iota + 1
	// Different is another payload under the key: the answer must be 409.
	Different
)

// Attempt is one HTTP request the soak sent and what came back.
type Attempt struct {
	Client   int // the client goroutine; -1 for the fault runner
	Op       OpKind
	Key      string
	Variant  Variant
	Instance int
	// Start and End are offsets from the start of the run.
	Start, End time.Duration
	// HTTP is the status, 0 when no answer came (Err says why).
	HTTP   int
	Code   string      // the error code of a non-2xx answer
	CallID string      // of a 2xx answer
	Status wire.Status // the call's status in a 2xx answer
	Err    string
	// Acked: the key had a 2xx answer before this attempt was sent (for
	// Different, only such keys are sent: nothing else must 409).
	Acked bool
}

// Answered reports whether the server answered.
func (a Attempt) Answered() bool { return a.HTTP != 0 }

// OK reports a 2xx answer.
func (a Attempt) OK() bool { return a.HTTP/100 == 2 }

// KeyInfo is what the soak sent under one key.
type KeyInfo struct {
	Key     string
	Payload Payload
}

// Event kinds.
const (
	// EventKill: the soak sent SIGKILL to the instance (it is down from At).
	EventKill = "kill"
	// EventExit: the instance's process was seen to exit (Detail: how).
	EventExit = "exit"
	// EventUp: the instance serves again (restarted, /readyz 200).
	EventUp = "up"
	// EventCrashHook: the fault runner sent a _crash_before_commit call.
	EventCrashHook = "crash-hook"
	// EventPGTerminate and EventPGRestart: the database was away from At
	// to End.
	EventPGTerminate = "pg-terminate"
	EventPGRestart   = "pg-restart"
	// EventPause: the instance was frozen (SIGSTOP) from At to End
	// (SIGCONT).
	EventPause = "pause"
	// EventPartition: the instance's database connections were
	// blackholed from At to End.
	EventPartition = "pg-partition"
)

// Pause is one pause fault: which instance, when, and the calls it was
// running when it was frozen (read from the database just before SIGSTOP).
type Pause struct {
	Instance int
	At, End  time.Duration
	// PID is the frozen process; its lease owner is "host:PID:start/N".
	PID   int
	Calls []HeldCall
}

// HeldCall is a call running under an owner at some moment.
type HeldCall struct {
	CallID  string
	Owner   string
	Attempt int64
}

// Probe is one request the partition fault sent to the partitioned
// instance: During the partition (it must be answered within
// PartitionBound), or after the heal (a 2xx within ResumeBound).
type Probe struct {
	Instance int
	Key      string
	During   bool
	// Start and End are run offsets; End is when the answer came, or the
	// probe gave up (HTTP 0).
	Start, End time.Duration
	// Healed is when the partition healed (resume probes only).
	Healed time.Duration
	HTTP   int
	Code   string
	Err    string
}

// Event is one thing the soak did to the system, or saw it do.
type Event struct {
	Kind     string
	Instance int // -1 for the database
	At, End  time.Duration
	// Planned: an exit the soak caused (a kill, a crash hook's exit 3).
	Planned bool
	// Code is an exit's status (-1 for a signal); Starting marks the exit
	// of a restarted process before /readyz answered.
	Code     int
	Starting bool
	Detail   string
}

// History is everything that happened in one run, safe for concurrent
// recording.
type History struct {
	mu       sync.Mutex
	start    time.Time
	attempts []Attempt
	events   []Event
	keys     map[string]KeyInfo
	order    []string
	pauses   []Pause
	probes   []Probe
}

// AddPause records a pause fault.
func (h *History) AddPause(p Pause) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.pauses = append(h.pauses, p)
}

// AddProbe records a partition probe.
func (h *History) AddProbe(p Probe) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.probes = append(h.probes, p)
}

// Faults returns copies of the pauses and the probes.
func (h *History) Faults() ([]Pause, []Probe) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Pause(nil), h.pauses...), append([]Probe(nil), h.probes...)
}

// NewHistory starts a history; offsets are measured from now.
func NewHistory() *History {
	return &History{start: time.Now(), keys: map[string]KeyInfo{}}
}

// Now is the offset of this moment from the start of the run.
func (h *History) Now() time.Duration { return time.Since(h.start) }

// AddKey records a key's own payload (before its first request is sent).
func (h *History) AddKey(key string, p Payload) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.keys[key]; !ok {
		h.order = append(h.order, key)
	}
	h.keys[key] = KeyInfo{Key: key, Payload: p}
}

// Record adds an attempt.
func (h *History) Record(a Attempt) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.attempts = append(h.attempts, a)
}

// Event adds an event.
func (h *History) Event(e Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, e)
}

// Snapshot returns copies of the attempts (by start), events (by time)
// and keys (in the order they were made).
func (h *History) Snapshot() ([]Attempt, []Event, []KeyInfo) {
	h.mu.Lock()
	defer h.mu.Unlock()
	attempts := append([]Attempt(nil), h.attempts...)
	events := append([]Event(nil), h.events...)
	keys := make([]KeyInfo, 0, len(h.order))
	for _, k := range h.order {
		keys = append(keys, h.keys[k])
	}
	sort.SliceStable(attempts, func(i, j int) bool { return attempts[i].Start < attempts[j].Start })
	sort.SliceStable(events, func(i, j int) bool { return events[i].At < events[j].At })
	return attempts, events, keys
}
