package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"

	"github.com/idemctl/idemctl/client"
	"github.com/idemctl/idemctl/internal/wire"
)

// The client commands (call, poll, calls, cancel) print JSON lines: one
// value per line on stdout, so a script reads them with a line reader and
// a JSON decoder, and an end the client itself reached (a timeout, an
// unreachable server) comes in the same shape as the API's errors.

// cliWriteJSONLine writes v as one compact JSON line.
func cliWriteJSONLine(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	// Compact: a server's raw bytes may be indented; one value, one line.
	if err := json.Compact(&buf, b); err != nil {
		return err
	}
	buf.WriteByte('\n')
	_, err = w.Write(buf.Bytes())
	return err
}

// cliWriteErrorLine writes a client-side end as the API's error shape, so a
// script reading the lines branches on error.code in every case.
func cliWriteErrorLine(w io.Writer, err error) {
	code, msg := "error", err.Error()
	var apiErr *client.APIError
	if errors.As(err, &apiErr) {
		code, msg = apiErr.Code, apiErr.Message
	}
	_ = cliWriteJSONLine(w, wire.Error{Error: wire.ErrorDetail{Code: code, Message: msg}})
}
