package wire

// Error codes of the API's error objects, the "code" of an error body or
// of a failed call's error (docs/api.md, "Errors").
const (
	// CodeInternal: something failed on the server's side; for a call,
	// also the outcome of a tool that could not run or be recorded.
	CodeInternal = "internal"
	// CodeCanceled: the call was stopped by a cancel request.
	CodeCanceled = "canceled"
	// CodeResultTooLarge: the tool's result exceeded the server's
	// MaxResultBytes; the call failed without an effect.
	CodeResultTooLarge = "result_too_large"
	// CodeInvalidArgs: the stored args were refused by the tool when it
	// ran (its rules changed since the call was accepted).
	CodeInvalidArgs = "invalid_args"
)
