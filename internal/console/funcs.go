package console

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"net/url"
	"strconv"
	"time"

	"github.com/idemctl/idemctl/internal/store"
)

var funcs = template.FuncMap{
	"ts":      formatTS,
	"elapsed": func(d float64) string { return fmt.Sprintf("+%.3fs", d) },
	"deref":   deref,
	"derefI":  derefInt,
	"derefTS": derefTS,
	"pretty":  prettyJSON,
	"summary": store.ErrorSummary,
	"age":     func(d time.Duration) string { return d.Round(time.Millisecond).String() },
	"f1":      func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) },
	// callsPage is a link to the calls list with v as its query.
	// html/template would escape '=' and '&' in a value placed after '?';
	// the values are encoded here, and the path is ours, so the URL is
	// safe.
	"callsPage": func(v url.Values) template.URL { return template.URL(Prefix + "/calls?" + v.Encode()) },
	"prefix":    func() string { return Prefix },
}

// formatTS is Unix seconds as UTC with milliseconds, as inspect prints them.
func formatTS(ts float64) string {
	sec := int64(ts)
	return time.Unix(sec, int64((ts-float64(sec))*1e9)).UTC().Format("2006-01-02 15:04:05.000")
}

func deref(p *string) string {
	if p == nil {
		return "—"
	}
	return *p
}

func derefInt(p *int64) string {
	if p == nil {
		return "—"
	}
	return strconv.FormatInt(*p, 10)
}

func derefTS(p *float64) string {
	if p == nil {
		return "—"
	}
	return formatTS(*p)
}

// prettyJSON indents stored JSON for reading; anything that is not JSON
// is shown as it is (the template escapes it either way).
func prettyJSON(raw json.RawMessage) string {
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		return string(raw)
	}
	return buf.String()
}
