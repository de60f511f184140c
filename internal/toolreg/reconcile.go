package toolreg

import (
	"fmt"
	"strings"

	"github.com/go-openapi/jsonpointer"
	"go.yaml.in/yaml/v3"

	"github.com/idemctl/idemctl/internal/httptool"
)

// SincePlaceholder is replaced, in a reconcile URL, by the start of the
// window being reconciled (RFC 3339, UTC, query-escaped).
const SincePlaceholder = "{since}"

// defaultNextPointer is where a page of the downstream's list names the
// next page when the reconcile block does not say.
const defaultNextPointer = "/next"

// Reconcile is an http tool's description of the downstream's list of
// records (docs/tools.md, "Reconciliation"), read by idemctl reconcile.
type Reconcile struct {
	// URL lists the records made since {since}.
	URL string
	// Items points, in one page, to the array of records.
	Items jsonpointer.Pointer
	// Key points, inside one record, to the idempotency key it was made
	// with: the effect id idemctl sent.
	Key jsonpointer.Pointer
	// Next points, in one page, to the URL of the next page (absolute, or
	// relative to the page's); absent, null or "" on the last page.
	Next jsonpointer.Pointer
	// Headers are the tool's own headers (secrets as for its calls), sent
	// with every list request.
	Headers []httptool.Header
}

// reconcileEntry is an http tool's reconcile field.
type reconcileEntry struct {
	URL   opt[string] `yaml:"url"`
	Items opt[string] `yaml:"items"`
	Key   opt[string] `yaml:"key"`
	Next  opt[string] `yaml:"next"`

	shape mapping
}

// UnmarshalYAML is as toolEntry's.
func (r *reconcileEntry) UnmarshalYAML(n *yaml.Node) error {
	type fields reconcileEntry
	return r.shape.decode(n, (*fields)(r))
}

func (r *reconcileEntry) markSet() { r.shape.markSet() }

var reconcileFields = fieldNames(reconcileEntry{}, "")

// parseReconcile checks a reconcile field; its errors start with the place
// after "reconcile" (".url: ...", or ": ..." for the field itself).
func parseReconcile(e reconcileEntry, headers []httptool.Header) (*Reconcile, error) {
	if !e.shape.ok {
		return nil, fmt.Errorf(": must be a mapping with %s", strings.Join(reconcileFields, ", "))
	}
	if k, found := e.shape.unknown(reconcileFields); found {
		return nil, fmt.Errorf(".%s: unknown field (allowed: %s)", k, strings.Join(reconcileFields, ", "))
	}
	if !e.URL.ok {
		return nil, fmt.Errorf(".url: required, a string, got %s", show(e.URL.raw))
	}
	if !strings.Contains(e.URL.val, SincePlaceholder) {
		return nil, fmt.Errorf(".url: must contain %s (where the start of the window goes)", SincePlaceholder)
	}
	if err := httptool.CheckURL(strings.ReplaceAll(e.URL.val, SincePlaceholder, "0")); err != nil {
		return nil, fmt.Errorf(".url: %w", err)
	}
	r := &Reconcile{URL: e.URL.val, Headers: headers}
	ptr := func(field string, v opt[string], def string) (jsonpointer.Pointer, error) {
		s := def
		if v.set || def == "" {
			if !v.ok {
				return jsonpointer.Pointer{}, fmt.Errorf(".%s: required, a JSON Pointer such as \"/data\", got %s", field, show(v.raw))
			}
			s = v.val
		}
		p, err := jsonpointer.New(s)
		if err != nil {
			return jsonpointer.Pointer{}, fmt.Errorf(".%s: %q is not a JSON Pointer (\"\" or \"/a/b\")", field, s)
		}
		return p, nil
	}
	var err error
	if r.Items, err = ptr("items", e.Items, ""); err != nil {
		return nil, err
	}
	if r.Key, err = ptr("key", e.Key, ""); err != nil {
		return nil, err
	}
	if r.Key.String() == "" {
		return nil, fmt.Errorf(`.key: "" points to the whole record; point to its key, e.g. "/idempotency_key"`)
	}
	if r.Next, err = ptr("next", e.Next, defaultNextPointer); err != nil {
		return nil, err
	}
	return r, nil
}
