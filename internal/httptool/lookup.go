package httptool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/idemctl/idemctl/internal/tool"
)

// The lookup (docs/tools.md, "Unknown outcomes"): before a new attempt of
// a call whose previous attempt's outcome is unknown, a tool with
// on_unknown: lookup asks the downstream whether the effect happened,
// instead of sending the request again to a downstream that may not
// honour its key.

// Placeholders of a lookup URL, replaced by the call's values (both are
// URL-safe: lowercase hex, letters and "_").
const (
	PlaceholderEffectID = "{effect_id}"
	PlaceholderCallID   = "{call_id}"
)

// LookupMethods are the methods a lookup may use; the default is GET. A
// POST lookup sends {"call_id": …, "effect_id": …} as its body (some APIs
// search through POST); a lookup must have no effect either way.
var LookupMethods = []string{http.MethodGet, http.MethodHead, http.MethodPost}

// LookupConfig is an http tool's lookup block.
type LookupConfig struct {
	// URL is an absolute http or https URL with {effect_id} or
	// {call_id} (or both) in it.
	URL string
	// Method is one of LookupMethods; "" means GET.
	Method string
	// Found are the statuses that mean the effect exists; nil means
	// [200].
	Found []int
	// NotFound are the statuses that mean it does not; nil means [404].
	NotFound []int
}

var placeholder = regexp.MustCompile(`\{[^{}]*\}`)

// checkLookup checks c and fills its defaults. Errors name the field
// ("url: …") after "lookup.".
func checkLookup(c *LookupConfig) error {
	if c.Method == "" {
		c.Method = http.MethodGet
	}
	if !slices.Contains(LookupMethods, c.Method) {
		return fmt.Errorf("method: %q is not one of %s", c.Method, strings.Join(LookupMethods, ", "))
	}
	for _, p := range placeholder.FindAllString(c.URL, -1) {
		if p != PlaceholderEffectID && p != PlaceholderCallID {
			return fmt.Errorf("url: unknown placeholder %s (known: %s, %s)", p, PlaceholderEffectID, PlaceholderCallID)
		}
	}
	if !strings.Contains(c.URL, PlaceholderEffectID) && !strings.Contains(c.URL, PlaceholderCallID) {
		// Without one, every call would ask the same question, and the
		// first effect found would settle every unknown call.
		return fmt.Errorf("url: must contain %s or %s, so the downstream is asked about this call's effect",
			PlaceholderEffectID, PlaceholderCallID)
	}
	if err := CheckURL(fill(c.URL, "c_0", "eff_0")); err != nil {
		return fmt.Errorf("url: %w", err)
	}
	if c.Found == nil {
		c.Found = []int{http.StatusOK}
	}
	if c.NotFound == nil {
		c.NotFound = []int{http.StatusNotFound}
	}
	for _, list := range []struct {
		name string
		v    []int
	}{{"found", c.Found}, {"not_found", c.NotFound}} {
		if len(list.v) == 0 {
			return fmt.Errorf("%s: must list at least one status", list.name)
		}
		for _, s := range list.v {
			if s < 100 || s > 599 {
				return fmt.Errorf("%s: %d is not an HTTP status (100 to 599)", list.name, s)
			}
		}
	}
	for _, s := range c.Found {
		if slices.Contains(c.NotFound, s) {
			return fmt.Errorf("not_found: %d is also in found", s)
		}
	}
	return nil
}

// fill replaces the placeholders of a lookup URL.
func fill(url, callID, effectID string) string {
	return strings.NewReplacer(PlaceholderEffectID, effectID, PlaceholderCallID, callID).Replace(url)
}

// HasLookup reports whether the tool has a lookup block.
func (t *Tool) HasLookup() bool { return t.cfg.Lookup != nil }

// Lookup asks the downstream whether inv's call's effect happened
// (docs/tools.md, "Unknown outcomes"), with the tool's headers and its
// Idempotency-Key and Idemctl-Call-Id, under the tool's timeout. A found
// answer is the success to record: the result an attempt answered 2xx
// would have ({"status", "body", "effect_id"}, with the lookup's status
// and body) and the effect row. A non-nil error means no answer to
// record: ctx ended first (shutdown, lost lease), or the tool has no
// lookup.
func (t *Tool) Lookup(ctx context.Context, inv tool.Invocation) (tool.LookupAnswer, error) {
	lc := t.cfg.Lookup
	if lc == nil {
		return tool.LookupAnswer{}, errors.New("httptool: " + t.cfg.Name + ": the tool has no lookup")
	}
	if err := ctx.Err(); err != nil {
		return tool.LookupAnswer{}, err
	}
	effectID := tool.EffectID(inv.CallID)
	actx, cancel := ctx, context.CancelFunc(func() {})
	if t.cfg.Timeout > 0 {
		actx, cancel = context.WithTimeout(ctx, t.cfg.Timeout)
	}
	defer cancel()
	var body io.Reader
	if lc.Method == http.MethodPost {
		b, err := json.Marshal(map[string]string{"call_id": inv.CallID, "effect_id": effectID})
		if err != nil {
			return tool.LookupAnswer{}, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(actx, lc.Method, fill(lc.URL, inv.CallID, effectID), body)
	if err != nil {
		return tool.LookupAnswer{}, fmt.Errorf("httptool: %s: building the lookup: %w", t.cfg.Name, err)
	}
	for _, h := range t.cfg.Headers {
		req.Header.Set(h.Name, h.Value.Reveal())
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set(HeaderIdempotencyKey, effectID)
	req.Header.Set(HeaderCallID, inv.CallID)
	resp, err := t.client.Do(req)
	var data []byte
	if err == nil {
		data, err = io.ReadAll(io.LimitReader(resp.Body, t.cfg.MaxBody+1))
		resp.Body.Close()
	}
	if err != nil {
		if ctx.Err() != nil {
			return tool.LookupAnswer{}, ctx.Err()
		}
		reason := "no complete answer within the tool's timeout of " + t.cfg.Timeout.String()
		if actx.Err() == nil {
			_, _, reason = classify(err)
		}
		if inv.Log != nil {
			inv.Log.Warn("http tool: no usable answer to the lookup", "tool", t.cfg.Name, "err", t.redact.string(err.Error()))
		}
		return tool.LookupAnswer{Verdict: tool.LookupFailed, Detail: reason}, nil
	}
	code := resp.StatusCode
	switch {
	case slices.Contains(lc.Found, code):
		if int64(len(data)) > t.cfg.MaxBody {
			return tool.LookupAnswer{Verdict: tool.LookupFailed, Status: code,
				Detail: fmt.Sprintf("answered %d with a body over %d bytes", code, t.cfg.MaxBody)}, nil
		}
		out, err := t.success(code, data, inv.CallID, effectID)
		if err != nil {
			return tool.LookupAnswer{}, err
		}
		return tool.LookupAnswer{Verdict: tool.LookupFound, Status: code, Detail: "answered " + strconv.Itoa(code), Found: out}, nil
	case slices.Contains(lc.NotFound, code):
		return tool.LookupAnswer{Verdict: tool.LookupNotFound, Status: code, Detail: "answered " + strconv.Itoa(code)}, nil
	}
	return tool.LookupAnswer{Verdict: tool.LookupFailed, Status: code,
		Detail: fmt.Sprintf("answered %d, neither found %v nor not_found %v", code, lc.Found, lc.NotFound)}, nil
}
