package wire

import "encoding/json"

// Page is the body of GET /v1/tool-calls: a page of calls, newest first,
// and the cursor of the next page (null on the last). C is Call where the
// server renders it, ReceivedCall where a client decodes it.
type Page[C any] struct {
	Calls []C     `json:"calls"`
	Next  *string `json:"next"`
}

// Stats is the body of GET /stats: logical calls against side effects,
// and the queue (docs/api.md, "Health, stats and metrics"). ByStatus has
// every status, zeros included. `idemctl inspect stats -o json` prints it
// without Queue: it reads a database, and the queue's limits are a
// server's.
type Stats struct {
	Calls    int64            `json:"calls"`
	Effects  int64            `json:"effects"`
	ByStatus map[Status]int64 `json:"by_status"`
	Queue    *Queue           `json:"queue,omitempty"`
}

// Queue is the queue part of Stats.
type Queue struct {
	// Depth is the number of pending calls in the database (read now).
	Depth int64 `json:"depth"`
	// OldestPendingAgeSeconds is how long ago the oldest pending call was
	// created, by the database's clock; 0 when none is pending.
	OldestPendingAgeSeconds float64 `json:"oldest_pending_age_seconds"`
	// MaxPending is this server's limit (--max-pending); 0 = unlimited.
	MaxPending int64 `json:"max_pending"`
	// Refused counts the new keys this server refused because the queue
	// was full, since it started.
	Refused int64 `json:"refused"`
}

// Health is the body of /healthz and /readyz when they answer 200.
type Health struct {
	Status string `json:"status"`
}

// HealthOK is Health's status when it answers 200.
const HealthOK = "ok"

// Tools is the body of GET /v1/tools: the tools sorted by name.
type Tools struct {
	Tools []Tool `json:"tools"`
}

// Tool is a tool as GET /v1/tools lists it (docs/api.md, "Tools"): never
// an http tool's URL or headers.
type Tool struct {
	Name        string `json:"name"`
	Kind        string `json:"kind"`
	Description string `json:"description,omitempty"`
	// Upstream is an mcp tool's entry in the tools file; Annotations
	// its annotations as the upstream lists them.
	Upstream    string          `json:"upstream,omitempty"`
	Annotations json.RawMessage `json:"annotations,omitempty"`
	Schema      json.RawMessage `json:"schema"`
	Effect      bool            `json:"effect"`
	Destructive *bool           `json:"destructive,omitempty"`
	Method      string          `json:"method,omitempty"`
	// Timeout bounds one attempt (a Go duration); omitted for the
	// built-ins, which bound themselves.
	Timeout     string    `json:"timeout,omitempty"`
	Retry       ToolRetry `json:"retry"`
	Concurrency int       `json:"concurrency"`
	// Dedup is the tool's intent-deduplication rule; nil: none.
	Dedup *ToolDedup `json:"dedup,omitempty"`
	// OnUnknown is an http or mcp tool's on_unknown (retry, lookup,
	// hold); omitted for the built-ins, which retry. The lookup's URL is
	// never listed.
	OnUnknown string `json:"on_unknown,omitempty"`
	// Rate is the tool's rate limit; nil: none.
	Rate *ToolRate `json:"rate,omitempty"`
	// Breaker is the tool's circuit breaker and its state; nil: none.
	Breaker *ToolBreaker `json:"breaker,omitempty"`
}

// ToolRetry is a tool's retry policy as listed (durations in Go's form).
type ToolRetry struct {
	MaxAttempts    int    `json:"max_attempts"`
	InitialBackoff string `json:"initial_backoff"`
	MaxBackoff     string `json:"max_backoff"`
}

// ToolDedup is a tool's intent-deduplication rule as listed: args sorted,
// window a Go duration.
type ToolDedup struct {
	Args   []string `json:"args"`
	Window string   `json:"window"`
}

// Redrive is the body of POST /v1/redrive (docs/api.md, "Redrive"): which
// of your failed calls to send back to pending. Every field is optional.
type Redrive struct {
	// Tool and Code select calls of that tool, whose error has that code.
	Tool string `json:"tool,omitempty"`
	Code string `json:"code,omitempty"`
	// Since and Until select calls created in [Since, Until), Unix
	// seconds.
	Since *float64 `json:"since,omitempty"`
	Until *float64 `json:"until,omitempty"`
	// Limit is the most calls redriven (0: 100; at most 1000).
	Limit int `json:"limit,omitempty"`
	// Force selects definite failures (retryable false) too.
	Force bool `json:"force,omitempty"`
	// DryRun selects without changing anything.
	DryRun bool `json:"dry_run,omitempty"`
}

// Resolve is the body of POST /v1/tool-calls/{call_id}/resolve (docs/api.md,
// "Resolving an unknown outcome"): how an operator settles a failed
// outcome_unknown call.
type Resolve struct {
	// Outcome is "succeeded" (the effect happened) or "failed" (it did
	// not).
	Outcome Status `json:"outcome"`
	// Result is the call's result with outcome succeeded, a JSON object; absent:
	// {"resolved": true}.
	Result json.RawMessage `json:"result,omitempty"`
	// Message is the error's message with outcome failed; absent: a
	// fixed one.
	Message string `json:"message,omitempty"`
}

// Redriven is the answer of POST /v1/redrive: the calls selected, newest
// first (as redriven, or as they are with dry_run), and whether more may
// match (run it again).
type Redriven[C any] struct {
	DryRun bool `json:"dry_run"`
	Calls  []C  `json:"calls"`
	More   bool `json:"more"`
}
