package wire

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// A webhook delivery is signed as Stripe signs its events (docs/api.md,
// "Verifying a delivery"): the HeaderSignature value is
// "t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">" under the
// endpoint's secret. The timestamp is inside the signed bytes, so a
// receiver that refuses old timestamps refuses replays of old deliveries.
// The server signs with SignWebhook, a receiver checks with VerifyWebhook
// (the public client's client.VerifyWebhook): the one definition of both.

// SignatureVersion is the scheme of the signature SignWebhook writes.
const SignatureVersion = "v1"

// ErrWebhookSignature is VerifyWebhook's answer for a delivery that is not
// signed with the secret: a missing or malformed header, no matching v1
// signature, or a timestamp outside the tolerance.
var ErrWebhookSignature = errors.New("webhook signature does not verify")

// SignWebhook is the HeaderSignature value of body sent at t.
func SignWebhook(secret []byte, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + "," + SignatureVersion + "=" + webhookMAC(secret, ts, body)
}

func webhookMAC(secret []byte, ts string, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// VerifyWebhook checks a HeaderSignature value against body (the raw
// bytes received, before any decoding) and secret: one of its v1
// signatures must match (a header may carry several, e.g. while a secret
// is rotated), compared in constant time, and its timestamp must be
// within tolerance of now (tolerance <= 0 skips that check). The error
// wraps ErrWebhookSignature.
func VerifyWebhook(header string, body, secret []byte, tolerance time.Duration, now time.Time) error {
	var (
		ts   string
		sigs []string
	)
	for part := range strings.SplitSeq(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			continue
		}
		switch k {
		case "t":
			ts = v
		case SignatureVersion:
			sigs = append(sigs, v)
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || len(sigs) == 0 {
		return fmt.Errorf("%w: want %s: t=<unix seconds>,%s=<hex>", ErrWebhookSignature, HeaderSignature, SignatureVersion)
	}
	want := webhookMAC(secret, ts, body)
	ok := false
	for _, s := range sigs {
		if hmac.Equal([]byte(s), []byte(want)) {
			ok = true
		}
	}
	if !ok {
		return fmt.Errorf("%w: no %s signature matches the body under this secret", ErrWebhookSignature, SignatureVersion)
	}
	if tolerance > 0 {
		age := now.Sub(time.Unix(sec, 0))
		if age > tolerance || age < -tolerance {
			return fmt.Errorf("%w: timestamp %d is %v away from now (tolerance %v)", ErrWebhookSignature, sec, age.Round(time.Second), tolerance)
		}
	}
	return nil
}
