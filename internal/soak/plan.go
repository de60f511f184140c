package soak

// The plan: what the soak will do, drawn from the seed alone. Each client
// goroutine has a stream of operations of its own and the fault runner has a
// stream of faults, each from a generator seeded with (seed, stream number),
// so the same seed and flags give the same operations and the same gaps
// whatever the scheduling. What the operations meet (which keys were
// acknowledged when a conflict is sent, which call a kill interrupts) depends
// on OS timing and is not reproduced.

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// OpKind is what one client operation does.
type OpKind int

// The operations.
const (
	// OpNew sends a new key.
	OpNew OpKind = iota + 1
	// OpRetry sends one of the client's earlier keys again with its own
	// payload: a same-key retry of an acknowledged or an unanswered request.
	OpRetry
	// OpConflict sends one of the client's acknowledged keys with another
	// payload: the server must answer 409.
	OpConflict
)

func (k OpKind) String() string {
	switch k {
	case OpNew:
		return "new"
	case OpRetry:
		return "retry"
	case OpConflict:
		return "conflict"
	}
	return "unknown"
}

// Tools of the workload. HTTPTool and LookupTool are declared in the
// tools file the soak writes for its own servers, each against its own demo
// downstream: HTTPTool's honours Idempotency-Key; LookupTool's ignores it
// and loses answers, and the tool has on_unknown: lookup.
const (
	ToolCharge = "charge"
	ToolEmail  = "send_email"
	ToolSleep  = "sleep"
	ToolFail   = "fail"
	HTTPTool   = "create_charge"
	LookupTool = "lookup_charge"
)

// httpTool reports whether tool is one of the soak's http tools, whose
// calls carry ArgRef.
func httpTool(tool string) bool { return tool == HTTPTool || tool == LookupTool }

// The gates of the workload's guarded tools (writeTools).
const (
	EmailRate           = 20
	EmailBurst          = 5
	FailBreakerFailures = 4
	FailBreakerCooldown = 250 * time.Millisecond
)

// ArgRef is the argument under which the soak's http-tool calls carry
// their own soak key. The downstream sees it in every request body, so it
// can tell which call a request belongs to without trusting the
// Idempotency-Key the request presents (what the checks judge).
const ArgRef = "ref"

// WithRef returns p with key as its ArgRef when p calls the http tool.
func WithRef(p Payload, key string) Payload {
	if !httpTool(p.Tool) {
		return p
	}
	args := make(map[string]any, len(p.Args)+1)
	for k, v := range p.Args {
		args[k] = v
	}
	args[ArgRef] = key
	return Payload{p.Tool, args}
}

// EffectTool reports whether a succeeded call of tool writes one effect.
func EffectTool(tool string) bool {
	return tool == ToolCharge || tool == ToolEmail || httpTool(tool)
}

// Payload is a request body: a tool and its arguments.
type Payload struct {
	Tool string         `json:"tool"`
	Args map[string]any `json:"args"`
}

// Op is one client operation.
type Op struct {
	Kind OpKind
	// Payload is the new key's request (OpNew only).
	Payload Payload
	// Pick chooses the earlier key of OpRetry and OpConflict: index Pick
	// modulo the number of candidates.
	Pick int
	// Instance is the instance the first attempt goes to, modulo the
	// number of instances; a retry after no answer goes to the next one,
	// as a load balancer would send it.
	Instance int
	// Wait asks the server to hold the answer until the call is final
	// (Prefer: wait).
	Wait bool
	// Once sends one request and gives up without an answer, as a client
	// that crashed would: the key stays unanswered until a later retry.
	Once bool
}

// Generator draws a client's operations.
type Generator struct {
	rng  *rand.Rand
	http bool
}

// NewGenerator returns client number client's operation stream for seed;
// withHTTP adds the http tool to the mix.
func NewGenerator(seed uint64, client int, withHTTP bool) *Generator {
	return &Generator{rng: rand.New(rand.NewPCG(seed, uint64(client)+1)), http: withHTTP}
}

// Next draws the next operation: 70 % new keys, 20 % same-key retries,
// 10 % conflicts.
func (g *Generator) Next() Op {
	op := Op{Pick: g.rng.IntN(1 << 30), Instance: g.rng.IntN(1 << 30), Wait: g.rng.IntN(4) == 0, Once: g.rng.IntN(5) == 0}
	switch r := g.rng.IntN(100); {
	case r < 70:
		op.Kind = OpNew
	case r < 90:
		op.Kind = OpRetry
	default:
		op.Kind = OpConflict
	}
	// The payload is drawn for every operation, used or not, so that the
	// stream does not depend on which kinds came before.
	op.Payload = g.payload()
	return op
}

// payload draws a tool and its arguments: effect tools, a slow one and
// failing ones (retryable once, always, and for good).
func (g *Generator) payload() Payload {
	n := 9
	if g.http {
		n = 12
	}
	switch g.rng.IntN(n) {
	case 0, 1, 2:
		return Payload{ToolCharge, map[string]any{"amount": 1 + g.rng.IntN(100000)}}
	case 3:
		return Payload{ToolEmail, map[string]any{"to": fmt.Sprintf("user%d@example.com", g.rng.IntN(1000)), "subject": "soak"}}
	case 4, 5:
		// 0.00 to 0.40 s: slow enough that kills land in running tools.
		return Payload{ToolSleep, map[string]any{"seconds": float64(g.rng.IntN(41)) / 100}}
	case 6:
		return Payload{ToolFail, map[string]any{"times": 1, "message": "soak: fails once"}}
	case 7:
		return Payload{ToolFail, map[string]any{"message": "soak: fails every attempt"}}
	case 8:
		return Payload{ToolFail, map[string]any{"retryable": false, "message": "soak: fails for good"}}
	case 9, 10:
		return Payload{HTTPTool, map[string]any{"amount": 1 + g.rng.IntN(100000)}}
	default:
		return Payload{LookupTool, map[string]any{"amount": 1 + g.rng.IntN(100000)}}
	}
}

// Other returns a payload that differs from p (another fingerprint): the
// same tool with changed arguments where that is simple, else a charge.
func Other(p Payload) Payload {
	switch p.Tool {
	case ToolCharge, HTTPTool, LookupTool:
		if a, ok := p.Args["amount"].(int); ok {
			return Payload{p.Tool, map[string]any{"amount": a%100000 + 1 + 100000}}
		}
	case ToolEmail:
		return Payload{ToolEmail, map[string]any{"to": p.Args["to"], "subject": "soak, other"}}
	}
	return Payload{ToolCharge, map[string]any{"amount": 424242}}
}

// FaultKind is one kind of fault.
type FaultKind int

// The faults.
const (
	// FaultKill sends SIGKILL to an instance; the soak restarts it.
	FaultKill FaultKind = iota + 1
	// FaultCrashHook sends an http-tool call with _crash_before_commit: the
	// instance that runs it dies after the downstream charged, before the
	// outcome is recorded (the worst moment for an effect).
	FaultCrashHook
	// FaultPGTerminate ends the servers' PostgreSQL connections.
	FaultPGTerminate
	// FaultPGRestart runs the user's PostgreSQL restart command.
	FaultPGRestart
	// FaultPause freezes an instance (SIGSTOP) for longer than its lease
	// while it runs tools, then thaws it (SIGCONT): the worker paused past
	// its lease of docs/design.md, whose late completion must be fenced.
	FaultPause
	// FaultPartition blackholes one instance's database connections (its
	// own TCP proxy forwards nothing, resets nothing), then heals them.
	FaultPartition
)

func (k FaultKind) String() string {
	switch k {
	case FaultKill:
		return "kill"
	case FaultCrashHook:
		return "crash-hook"
	case FaultPGTerminate:
		return "pg-terminate"
	case FaultPGRestart:
		return "pg-restart"
	case FaultPause:
		return "pause"
	case FaultPartition:
		return "pg-partition"
	}
	return "unknown"
}

// Fault is one planned fault: wait Gap, then inflict Kind on Instance
// (modulo the number of instances). Frac, in [0, 1), places the length of
// a pause or a partition within its range.
type Fault struct {
	Gap      time.Duration
	Kind     FaultKind
	Instance int
	Frac     float64
}

// FaultKinds is the fault mix of a soak that runs its own servers: kills
// three times as often as crash hooks, and the database faults when asked
// for; more adds further kinds (pauses, partitions), each as often as a
// crash hook.
func FaultKinds(pgFaults, pgRestart bool, more ...FaultKind) []FaultKind {
	k := []FaultKind{FaultKill, FaultKill, FaultKill, FaultCrashHook}
	if pgFaults {
		k = append(k, FaultPGTerminate, FaultPGTerminate)
	}
	if pgRestart {
		k = append(k, FaultPGRestart)
	}
	return append(k, more...)
}

// Within returns the length frac places in [lo, hi].
func Within(lo, hi time.Duration, frac float64) time.Duration {
	return lo + time.Duration(frac*float64(hi-lo))
}

// FaultGenerator draws the fault schedule.
type FaultGenerator struct {
	rng      *rand.Rand
	kinds    []FaultKind // weighted: a kind listed twice is drawn twice as often
	min, max time.Duration
}

// NewFaultGenerator returns the fault stream for seed: gaps uniform in
// [minGap, maxGap], kinds drawn from kinds (a kind listed more than once is
// drawn more often).
func NewFaultGenerator(seed uint64, kinds []FaultKind, minGap, maxGap time.Duration) *FaultGenerator {
	return &FaultGenerator{rng: rand.New(rand.NewPCG(seed, 0)), kinds: kinds, min: minGap, max: maxGap}
}

// Next draws the next fault.
func (g *FaultGenerator) Next() Fault {
	// One draw per field, always: the kinds and instances do not depend
	// on the gaps, so --min-gap and --max-gap change only the timing.
	r := g.rng.Uint64()
	gap := g.min + time.Duration(r%uint64(g.max-g.min+1))
	return Fault{Gap: gap, Kind: g.kinds[g.rng.IntN(len(g.kinds))], Instance: g.rng.IntN(1 << 30), Frac: g.rng.Float64()}
}
