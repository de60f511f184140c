package mcpdoor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemctl/idemctl/internal/wire"
)

// readOnly is the annotation of the helper tools: they read, never record.
func readOnly() *mcp.ToolAnnotations {
	no := false
	return &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, DestructiveHint: &no}
}

func getCallTool() *mcp.Tool {
	return &mcp.Tool{
		Name: GetCallTool,
		Description: "Read a call idemctl recorded, by its call_id or by its idempotency key: " +
			"to find out what happened to a call after a restart, without calling the tool again.",
		InputSchema: map[string]any{"type": "object", "additionalProperties": false,
			"properties": map[string]any{
				"call_id": map[string]any{"type": "string", "description": "the call's id (c_ and 16 hex digits)"},
				"key":     map[string]any{"type": "string", "description": "the idempotency key the call was made with"},
			}},
		Annotations: readOnly(),
	}
}

func listCallsTool() *mcp.Tool {
	return &mcp.Tool{
		Name:        ListCallsTool,
		Description: "List the most recent calls idemctl recorded, newest first, optionally of one tool.",
		InputSchema: map[string]any{"type": "object", "additionalProperties": false,
			"properties": map[string]any{
				"tool":  map[string]any{"type": "string", "description": "only calls of this tool"},
				"limit": map[string]any{"type": "integer", "minimum": 1, "maximum": MaxListLimit, "default": DefaultListLimit},
			}},
		Annotations: readOnly(),
	}
}

// getCall is idemctl_get_call: exactly one of call_id and key.
func (d *door) getCall(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var in struct {
		CallID string `json:"call_id"`
		Key    string `json:"key"`
	}
	if err := strictArgs(req.Params.Arguments, &in); err != nil {
		return toolError(wire.CodeBadRequest, err.Error(), nil), nil
	}
	if (in.CallID == "") == (in.Key == "") {
		return toolError(wire.CodeBadRequest, "give exactly one of call_id and key", nil), nil
	}
	var (
		c   Call
		err error
	)
	if in.CallID != "" {
		c, err = d.c.Get(ctx, d.opts.Principal(req), in.CallID)
	} else {
		c, err = d.c.GetByKey(ctx, d.opts.Principal(req), in.Key)
	}
	if err != nil {
		return errorResult(err, in.Key)
	}
	return callObject(c), nil
}

// listCalls is idemctl_list_calls.
func (d *door) listCalls(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var in struct {
		Tool  string `json:"tool"`
		Limit *int   `json:"limit"`
	}
	if err := strictArgs(req.Params.Arguments, &in); err != nil {
		return toolError(wire.CodeBadRequest, err.Error(), nil), nil
	}
	limit := DefaultListLimit
	if in.Limit != nil {
		if *in.Limit < 1 || *in.Limit > MaxListLimit {
			return toolError(wire.CodeBadRequest, fmt.Sprintf("limit must be from 1 to %d", MaxListLimit), nil), nil
		}
		limit = *in.Limit
	}
	calls, err := d.c.List(ctx, d.opts.Principal(req), in.Tool, limit)
	if err != nil {
		return errorResult(err, "")
	}
	out := make([]json.RawMessage, 0, len(calls))
	for _, c := range calls {
		out = append(out, rawOf(c))
	}
	body := map[string]any{"calls": out}
	return &mcp.CallToolResult{StructuredContent: body, Content: textOf(body)}, nil
}

// callObject answers with the whole call object.
func callObject(c Call) *mcp.CallToolResult {
	raw := rawOf(c)
	return &mcp.CallToolResult{StructuredContent: raw, Content: []mcp.Content{&mcp.TextContent{Text: string(raw)}}}
}

// rawOf is the API's call object: the bytes the API sent when the Caller
// has them, else the call marshaled (Call.MarshalJSON).
func rawOf(c Call) json.RawMessage {
	b, _ := json.Marshal(c) // cannot fail: plain fields and JSON the API made
	return b
}

// strictArgs decodes a helper tool's arguments, refusing unknown members.
func strictArgs(raw json.RawMessage, v any) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return errors.New("arguments: " + err.Error())
	}
	return nil
}
