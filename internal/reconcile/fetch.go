// Package reconcile compares what a downstream recorded with what idemctl
// recorded for one http tool (docs/cli.md, "reconcile"): the third of the
// three things a real external effect needs, after the downstream key and
// the local state. Fetch reads the downstream's list of records, as the
// tool's reconcile block describes it; Compare judges it against the
// tool's effects and calls, whichever way the caller read those (a
// database or a server).
package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/go-openapi/jsonpointer"

	"github.com/idemctl/idemctl/internal/toolreg"
)

// Limits on the downstream's list.
const (
	// MaxPageBytes caps one page's body.
	MaxPageBytes = 16 << 20
	// MaxPages caps the pages of one listing: a downstream whose next
	// links never end must not keep the command running for ever.
	MaxPages = 10000
)

// Record is one downstream record.
type Record struct {
	// Key is the idempotency key the record was made with, read at the
	// block's key pointer; "" when the record has none (or not a string).
	Key string `json:"key"`
	// Record is the record as the downstream listed it.
	Record json.RawMessage `json:"record"`
}

// SinceURL is the block's list URL for a window starting at since.
func SinceURL(rc *toolreg.Reconcile, since time.Time) string {
	return strings.ReplaceAll(rc.URL, toolreg.SincePlaceholder,
		url.QueryEscape(since.UTC().Format(time.RFC3339Nano)))
}

// Fetch reads every record the downstream lists since then, following the
// next links page by page. hc nil is http.DefaultClient. Errors name the
// page's URL and the answer's status, never a header or a body (either may
// carry a secret).
func Fetch(ctx context.Context, hc *http.Client, rc *toolreg.Reconcile, since time.Time) ([]Record, error) {
	if hc == nil {
		hc = http.DefaultClient
	}
	page := SinceURL(rc, since)
	seen := map[string]bool{}
	var out []Record
	for n := 1; page != ""; n++ {
		if n > MaxPages {
			return nil, fmt.Errorf("more than %d pages: the downstream's next links do not end", MaxPages)
		}
		if seen[page] {
			return nil, fmt.Errorf("page %d: the next link %s repeats an earlier page", n, page)
		}
		seen[page] = true
		recs, next, err := fetchPage(ctx, hc, rc, page)
		if err != nil {
			return nil, fmt.Errorf("page %d (%s): %w", n, page, err)
		}
		out = append(out, recs...)
		page = next
	}
	return out, nil
}

// fetchPage reads one page: its records and the absolute URL of the next
// ("" on the last).
func fetchPage(ctx context.Context, hc *http.Client, rc *toolreg.Reconcile, page string) ([]Record, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, page, nil)
	if err != nil {
		return nil, "", errors.New("not a valid URL")
	}
	for _, h := range rc.Headers {
		req.Header.Set(h.Name, h.Value.Reveal())
	}
	req.Header.Set("Accept", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL is named once, by the caller
		}
		return nil, "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, "", fmt.Errorf("the downstream answered %s, want 200", resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxPageBytes+1))
	if err != nil {
		return nil, "", fmt.Errorf("reading the answer: %w", err)
	}
	if len(body) > MaxPageBytes {
		return nil, "", fmt.Errorf("the page exceeds %d bytes", MaxPageBytes)
	}
	var doc any
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, "", errors.New("the answer is not JSON")
	}
	items, _, err := rc.Items.Get(doc)
	if err != nil {
		return nil, "", fmt.Errorf("items %q: not in the answer", rc.Items.String())
	}
	list, ok := items.([]any)
	if !ok {
		return nil, "", fmt.Errorf("items %q: not an array", rc.Items.String())
	}
	recs := make([]Record, 0, len(list))
	for _, it := range list {
		raw, _ := json.Marshal(it) // decoded JSON encodes
		recs = append(recs, Record{Key: keyOf(rc.Key, it), Record: raw})
	}
	next, err := nextURL(rc.Next, doc, page)
	if err != nil {
		return nil, "", err
	}
	return recs, next, nil
}

// keyOf reads a record's key: "" when it is missing or not a string.
func keyOf(p jsonpointer.Pointer, record any) string {
	v, _, err := p.Get(record)
	if err != nil {
		return ""
	}
	s, _ := v.(string)
	return s
}

// nextURL reads the next link of a page, resolved against the page's URL:
// "" when the page has none (missing, null or "").
func nextURL(p jsonpointer.Pointer, doc any, page string) (string, error) {
	v, _, err := p.Get(doc)
	if err != nil || v == nil {
		return "", nil
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("next %q: not a string", p.String())
	}
	if s == "" {
		return "", nil
	}
	base, _ := url.Parse(page) // it was requested
	ref, err := url.Parse(s)
	if err != nil {
		return "", fmt.Errorf("next %q: not a URL", p.String())
	}
	u := base.ResolveReference(ref)
	// The tool's headers go with every page: a link to another origin
	// would hand them to it.
	if u.Scheme != base.Scheme || u.Host != base.Host {
		return "", fmt.Errorf("next %q: a link to another origin (%s://%s) is not followed", p.String(), u.Scheme, u.Host)
	}
	return u.String(), nil
}
