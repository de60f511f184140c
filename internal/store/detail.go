package store

import "encoding/json"

// ErrorSummary renders a call's error object {"code","message",...} as the
// short text both backends write into audit details ("code: message"), so
// the same story reads the same on SQLite and PostgreSQL. Anything that is
// not such an object is shown raw, cut at 200 bytes.
func ErrorSummary(errJSON json.RawMessage) string {
	var e struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	if json.Unmarshal(errJSON, &e) != nil || (e.Code == "" && e.Message == "") {
		const max = 200
		if len(errJSON) > max {
			return string(errJSON[:max]) + "…"
		}
		return string(errJSON)
	}
	if e.Message == "" {
		return e.Code
	}
	return e.Code + ": " + e.Message
}
