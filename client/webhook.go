package client

import (
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/idemctl/idemctl/internal/wire"
)

// A receiver of completion webhooks (docs/api.md, "Completion webhooks")
// gets one POST per final state of a call that named its URL: the call
// object as the body, the delivery's id as Idempotency-Key (the same on
// every retry: deduplicate by it), and an Idemctl-Signature to check
// before trusting the body.

// ErrWebhookSignature matches (errors.Is) every refusal of VerifyWebhook
// and ReadWebhook: a missing or malformed signature, one made with
// another secret or over other bytes, or one older than the tolerance.
var ErrWebhookSignature = wire.ErrWebhookSignature

// DefaultWebhookTolerance is how far from now a delivery's signed
// timestamp may be: older deliveries are refused as replays.
const DefaultWebhookTolerance = 5 * time.Minute

// MaxWebhookBody bounds the body ReadWebhook reads.
const MaxWebhookBody = 4 << 20

// VerifyWebhook checks a delivery's Idemctl-Signature header (signature)
// against its raw body and the endpoint's secret: the HMAC-SHA256 of
// "<t>.<body>" under secret must match a v1 signature of the header, and
// t must be within tolerance of now (0 skips the check). Pass the bytes as
// received: a body decoded and encoded again does not verify. The error
// matches ErrWebhookSignature.
func VerifyWebhook(signature string, body, secret []byte, tolerance time.Duration) error {
	return wire.VerifyWebhook(signature, body, secret, tolerance, time.Now())
}

// Webhook is one verified delivery.
type Webhook struct {
	// ID is the delivery's id (its Idempotency-Key): the same on every
	// attempt of this delivery.
	ID string
	// Call is the call as it ended.
	Call Call
}

// ReadWebhook reads and verifies a delivery as an http.Handler receives
// it (with DefaultWebhookTolerance) and decodes its call. Answer 2xx once
// it is stored: any other answer, or none, makes the server send it again
// later, with the same ID.
func ReadWebhook(r *http.Request, secret []byte) (Webhook, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxWebhookBody+1))
	if err != nil {
		return Webhook{}, fmt.Errorf("reading the webhook body: %w", err)
	}
	if len(body) > MaxWebhookBody {
		return Webhook{}, fmt.Errorf("webhook body larger than %d bytes", MaxWebhookBody)
	}
	if err := VerifyWebhook(r.Header.Get(wire.HeaderSignature), body, secret, DefaultWebhookTolerance); err != nil {
		return Webhook{}, err
	}
	var c wire.ReceivedCall
	if err := c.UnmarshalJSON(body); err != nil {
		return Webhook{}, fmt.Errorf("decoding the webhook's call: %w", err)
	}
	return Webhook{ID: r.Header.Get(wire.HeaderIdempotencyKey), Call: c}, nil
}
