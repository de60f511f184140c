package toolreg

import (
	"fmt"
	"strings"
	"time"

	"github.com/idemctl/idemctl/internal/store"
	"go.yaml.in/yaml/v3"
)

// Bounds and defaults of the rate and breaker fields (docs/tools.md,
// "Rate limits", "Circuit breakers").
const (
	// maxRateLimit caps rate.limit and rate.burst.
	maxRateLimit = 1_000_000
	// maxRatePer caps rate.per: a daily quota is the longest span.
	maxRatePer = 24 * time.Hour
	// defaultRatePer is rate.per when left out.
	defaultRatePer = time.Second
	// defaultBurst is rate.burst when left out: one at a time, so the
	// downstream never sees more than limit in any span of per, plus one.
	defaultBurst = 1
	// maxBreakerFailures caps breaker.failures.
	maxBreakerFailures = 1000
	// The breaker's defaults.
	defaultBreakerFailures = 5
	defaultBreakerCooldown = 30 * time.Second
)

// rateEntry is a tool's rate field.
type rateEntry struct {
	Limit opt[int]    `yaml:"limit"`
	Per   opt[string] `yaml:"per"`
	Burst opt[int]    `yaml:"burst"`

	shape mapping
}

// UnmarshalYAML is as toolEntry's.
func (r *rateEntry) UnmarshalYAML(n *yaml.Node) error {
	type fields rateEntry
	return r.shape.decode(n, (*fields)(r))
}

func (r *rateEntry) markSet() { r.shape.markSet() }

// breakerEntry is a tool's breaker field.
type breakerEntry struct {
	Failures opt[int]    `yaml:"failures"`
	Cooldown opt[string] `yaml:"cooldown"`
	FailFast opt[bool]   `yaml:"fail_fast"`

	shape mapping
}

// UnmarshalYAML is as toolEntry's.
func (b *breakerEntry) UnmarshalYAML(n *yaml.Node) error {
	type fields breakerEntry
	return b.shape.decode(n, (*fields)(b))
}

func (b *breakerEntry) markSet() { b.shape.markSet() }

// parseRate checks a rate field; its errors start with the place after
// "rate", as parseRetry's do. The keys are checked in sorted order.
func parseRate(e rateEntry) (*store.Rate, error) {
	if !e.shape.ok {
		return nil, fmt.Errorf(": must be a mapping with %s", strings.Join(rateFields, ", "))
	}
	r := &store.Rate{Per: defaultRatePer, Burst: defaultBurst}
	for _, k := range e.shape.keys {
		switch k {
		case "limit":
			if !e.Limit.ok || e.Limit.val < 1 || e.Limit.val > maxRateLimit {
				return nil, fmt.Errorf(".limit: must be an integer from 1 to %d, got %s", maxRateLimit, show(e.Limit.raw))
			}
			r.Limit = e.Limit.val
		case "per":
			if !e.Per.ok {
				return nil, fmt.Errorf(".per: %s is not a duration (write it with a unit, e.g. \"1s\")", show(e.Per.raw))
			}
			d, err := time.ParseDuration(e.Per.val)
			if err != nil || d <= 0 || d > maxRatePer {
				return nil, fmt.Errorf(".per: %q must be a duration above 0 and at most %s", e.Per.val, maxRatePer)
			}
			r.Per = d
		case "burst":
			if !e.Burst.ok || e.Burst.val < 1 || e.Burst.val > maxRateLimit {
				return nil, fmt.Errorf(".burst: must be an integer from 1 to %d, got %s", maxRateLimit, show(e.Burst.raw))
			}
			r.Burst = e.Burst.val
		default:
			return nil, fmt.Errorf(".%s: unknown field (allowed: %s)", k, strings.Join(rateFields, ", "))
		}
	}
	if r.Limit == 0 {
		return nil, fmt.Errorf(".limit: required, an integer from 1 to %d", maxRateLimit)
	}
	return r, nil
}

// parseBreaker checks a breaker field; its errors start with the place
// after "breaker". Every key has a default, so "breaker: {}" is a breaker
// with the defaults.
func parseBreaker(e breakerEntry) (*store.Breaker, error) {
	if !e.shape.ok {
		return nil, fmt.Errorf(": must be a mapping with %s", strings.Join(breakerFields, ", "))
	}
	b := &store.Breaker{Failures: defaultBreakerFailures, Cooldown: defaultBreakerCooldown}
	for _, k := range e.shape.keys {
		switch k {
		case "failures":
			if !e.Failures.ok || e.Failures.val < 1 || e.Failures.val > maxBreakerFailures {
				return nil, fmt.Errorf(".failures: must be an integer from 1 to %d, got %s", maxBreakerFailures, show(e.Failures.raw))
			}
			b.Failures = e.Failures.val
		case "cooldown":
			d, err := duration(e.Cooldown)
			if err != nil {
				return nil, fmt.Errorf(".cooldown: %v", err)
			}
			b.Cooldown = d
		case "fail_fast":
			if !e.FailFast.ok {
				return nil, fmt.Errorf(".fail_fast: must be true or false, got %s", show(e.FailFast.raw))
			}
			b.FailFast = e.FailFast.val
		default:
			return nil, fmt.Errorf(".%s: unknown field (allowed: %s)", k, strings.Join(breakerFields, ", "))
		}
	}
	return b, nil
}

// Gate is the tool's gate (store.Gate): its rate limit and breaker; a
// gate that guards nothing when the tool has neither.
func (t *Tool) Gate() store.Gate { return store.Gate{Tool: t.Name, Rate: t.Rate, Breaker: t.Breaker} }
