// Package wire holds the names of the HTTP API that both sides of it use
// (the server and the client), so they are written once. The call's JSON
// shape still lives with each side (server.CallView, client.Call).
package wire

// ViaHeader names the door a new call comes through, on POST
// /v1/tool-calls: `idemctl mcp` sends "mcp" for the agent calls it
// forwards; the server records it as the call's via (docs/api.md,
// "Headers"). Any other value, or none, is the API's own door.
const ViaHeader = "Idemctl-Via"
