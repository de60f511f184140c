package wire

// Paths of the API (docs/api.md).
const (
	// PathCalls is POST (submit) and GET (list) of calls.
	PathCalls = "/v1/tool-calls"
	// PathCallsByKey is the prefix of GET /v1/tool-calls/by-key/{key}.
	PathCallsByKey = PathCalls + "/by-key/"
	// PathRedrive sends failed calls back to pending (POST).
	PathRedrive = "/v1/redrive"
	// PathTools lists the tools (GET).
	PathTools = "/v1/tools"
	// PathStats counts calls against effects (GET).
	PathStats = "/stats"
	// PathHealthz and PathReadyz are the health checks; they need no
	// token.
	PathHealthz = "/healthz"
	PathReadyz  = "/readyz"
	// PathMetrics is the Prometheus endpoint.
	PathMetrics = "/metrics"
	// PathMCP is the MCP front door (docs/mcp.md).
	PathMCP = "/mcp"
	// PathOpenAPI is the API's OpenAPI description as JSON (GET; no
	// token needed, docs/openapi.yaml).
	PathOpenAPI = "/v1/openapi.json"
)

// CallPath is the path of a call's resource, /v1/tool-calls/{call_id}:
// Location and query_url. callID is used as it is; a client that sends
// an id it did not get from the server escapes it first.
func CallPath(callID string) string { return PathCalls + "/" + callID }

// ActionCancel is the action of POST /v1/tool-calls/{call_id}/cancel.
const ActionCancel = "cancel"

// CancelPath is the path that cancels a call (POST).
func CancelPath(callID string) string { return CallPath(callID) + "/" + ActionCancel }

// ActionResolve is the action of POST /v1/tool-calls/{call_id}/resolve.
const ActionResolve = "resolve"

// ResolvePath is the path that settles an outcome_unknown call (POST).
func ResolvePath(callID string) string { return CallPath(callID) + "/" + ActionResolve }
