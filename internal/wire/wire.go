// Package wire is the one definition of idemctl's HTTP API as it travels
// (docs/api.md): the call object, the error body, the error codes, the
// call statuses, the header names, the paths, and the stats, list-page and
// tool-listing bodies. The server renders these types, the client and the
// MCP door decode them, and inspect embeds the call, so a field added to
// the API is one struct and one test. No other package spells a header
// name, a status or an error code as a string literal.
//
// The package imports nothing of idemctl: every layer may use it.
package wire
