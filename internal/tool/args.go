package tool

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
)

// The readers below take a value of Invocation.Args as normalized
// arguments hold it (json.Number) or as a Go caller writes it (float64,
// int, int64), so every tool reads numbers, and words its refusals, alike.

// Number converts a JSON number (json.Number, or a Go number) to float64;
// NaN and infinities are not numbers.
func Number(v any) (float64, bool) {
	var f float64
	switch x := v.(type) {
	case json.Number:
		var err error
		f, err = strconv.ParseFloat(string(x), 64)
		if err != nil {
			return 0, false
		}
	case float64:
		f = x
	case int:
		f = float64(x)
	case int64:
		f = float64(x)
	default:
		return 0, false
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, false
	}
	return f, true
}

// Integer converts a JSON number with an integral value to int64. The
// value, not the spelling, decides: 1.0 and 1e0 are the integer 1, as they
// are for the fingerprint.
func Integer(v any) (int64, bool) {
	f, ok := Number(v)
	if !ok || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return 0, false
	}
	return int64(f), true
}

// Describe renders an argument value for an error message: a string is
// quoted and cut at 40 bytes, a container is named, not shown.
func Describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "nothing"
	case json.Number:
		return string(x)
	case string:
		if len(x) > 40 {
			x = x[:40] + "..."
		}
		return "string " + strconv.Quote(x)
	case bool:
		return "boolean " + strconv.FormatBool(x)
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	case float64, int, int64:
		return fmt.Sprint(x)
	}
	return fmt.Sprintf("%T", v)
}
