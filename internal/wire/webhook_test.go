package wire

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"testing"
	"time"
)

// TestWebhookSignature: the header is Stripe's shape, the MAC is the
// HMAC-SHA256 of "t.body" as a receiver computes it by hand, and
// VerifyWebhook accepts exactly the signed body, secret and a timestamp
// within the tolerance.
func TestWebhookSignature(t *testing.T) {
	secret, body := []byte("whsec_test"), []byte(`{"call_id":"c_1","status":"succeeded"}`)
	at := time.Unix(1796114835, 0)
	header := SignWebhook(secret, at, body)

	m := hmac.New(sha256.New, secret)
	m.Write([]byte("1796114835." + string(body)))
	if want := "t=1796114835,v1=" + hex.EncodeToString(m.Sum(nil)); header != want {
		t.Fatalf("SignWebhook = %q, want %q", header, want)
	}
	if err := VerifyWebhook(header, body, secret, 5*time.Minute, at.Add(time.Minute)); err != nil {
		t.Fatalf("a good signature: %v", err)
	}
	// Another signature first (a rotated secret's) does not hide the good one.
	if err := VerifyWebhook("t=1796114835,v1=00,"+header[len("t=1796114835,"):], body, secret, 0, at); err != nil {
		t.Fatalf("two signatures, the second good: %v", err)
	}
	for name, tc := range map[string]struct {
		header string
		body   []byte
		secret []byte
		now    time.Time
	}{
		"another body":        {header, []byte(`{"call_id":"c_1","status":"failed"}`), secret, at},
		"another secret":      {header, body, []byte("whsec_other"), at},
		"too old":             {header, body, secret, at.Add(6 * time.Minute)},
		"from the future":     {header, body, secret, at.Add(-6 * time.Minute)},
		"no header":           {"", body, secret, at},
		"no timestamp":        {header[len("t=1796114835,"):], body, secret, at},
		"timestamp moved":     {"t=1796114836," + header[len("t=1796114835,"):], body, secret, at},
		"another scheme only": {"t=1796114835,v0=" + header[len("t=1796114835,v1="):], body, secret, at},
	} {
		if err := VerifyWebhook(tc.header, tc.body, tc.secret, 5*time.Minute, tc.now); !errors.Is(err, ErrWebhookSignature) {
			t.Errorf("%s: VerifyWebhook = %v, want ErrWebhookSignature", name, err)
		}
	}
}
