package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/idemctl/idemctl/internal/callview"
	"github.com/idemctl/idemctl/internal/logkey"
	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/wire"
)

// Defaults of Config.
const (
	DefaultTimeout        = 10 * time.Second
	DefaultInitialBackoff = 5 * time.Second
	DefaultMaxBackoff     = time.Hour
	DefaultRetryFor       = 24 * time.Hour
	DefaultPoll           = time.Second
	DefaultBatch          = 8
)

// Config configures a Deliverer. Zero fields take the defaults.
type Config struct {
	// Allow is the allow-list: a delivery is sent only to a URL it still
	// allows, signed with the matching endpoint's secret.
	Allow *Allow
	// Owner names this sender in the outbox's claims (the executor's owner).
	Owner string
	// Timeout bounds one request to a receiver, its answer included.
	Timeout time.Duration
	// InitialBackoff is the wait after the first failed attempt; it
	// doubles after each, up to MaxBackoff.
	InitialBackoff, MaxBackoff time.Duration
	// RetryFor is how long after the call's end a delivery is retried;
	// a failed attempt whose next try would fall later gives it up.
	RetryFor time.Duration
	// Poll is how often the outbox is looked at when nothing wakes the
	// loop (another instance's completions, retries coming due).
	Poll time.Duration
	// Batch is the most deliveries claimed, and sent at once, per round.
	Batch int
	// Client sends the requests; nil: one with Timeout that follows no
	// redirect.
	Client *http.Client
	Logger *slog.Logger
}

func (c *Config) defaults() {
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.InitialBackoff <= 0 {
		c.InitialBackoff = DefaultInitialBackoff
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = DefaultMaxBackoff
	}
	if c.RetryFor <= 0 {
		c.RetryFor = DefaultRetryFor
	}
	if c.Poll <= 0 {
		c.Poll = DefaultPoll
	}
	if c.Batch <= 0 {
		c.Batch = DefaultBatch
	}
	if c.Client == nil {
		c.Client = &http.Client{
			Timeout: c.Timeout,
			// A redirect could lead anywhere: the allow-list judged this
			// URL, not the one a receiver points to.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// lease is how long a claimed delivery is this sender's: longer than one
// request may take, so a live sender never loses it mid-request; a sender
// that died leaves it for another after that.
func (c *Config) lease() time.Duration { return 2*c.Timeout + 5*time.Second }

// Deliverer sends the outbox's deliveries: it claims due ones under a
// lease, sends each once (POST of the call object, signed), and records
// the attempt (store.EndDelivery): delivered on a 2xx, else retried with
// exponential backoff until RetryFor has passed since the call ended,
// then given up.
type Deliverer struct {
	st   store.Store
	cfg  Config
	m    *metrics
	wake chan struct{}
}

// New returns a Deliverer of st's outbox; Run runs it.
func New(st store.Store, cfg Config) *Deliverer {
	cfg.defaults()
	return &Deliverer{st: st, cfg: cfg, m: newMetrics(st), wake: make(chan struct{}, 1)}
}

// Wake makes the loop look at the outbox now (a completion wrote to it).
func (d *Deliverer) Wake() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// Run delivers until ctx ends; a round in flight finishes its requests
// (each bounded by Timeout) first.
func (d *Deliverer) Run(ctx context.Context) {
	t := time.NewTicker(d.cfg.Poll)
	defer t.Stop()
	for {
		for d.round(ctx) == d.cfg.Batch && ctx.Err() == nil {
			// A full batch: more may be due.
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-d.wake:
		}
	}
}

// round claims and sends one batch, and returns how many it claimed.
func (d *Deliverer) round(ctx context.Context) int {
	claimed, err := d.st.ClaimDeliveries(ctx, d.cfg.Owner, d.cfg.lease(), d.cfg.Batch)
	if err != nil {
		if ctx.Err() == nil {
			d.cfg.Logger.Warn("webhook deliveries not claimed", logkey.Err, err)
		}
		return 0
	}
	var wg sync.WaitGroup
	for _, dl := range claimed {
		wg.Go(func() { d.deliver(context.WithoutCancel(ctx), dl) })
	}
	wg.Wait()
	return len(claimed)
}

// deliver makes one attempt of dl and records it.
func (d *Deliverer) deliver(ctx context.Context, dl store.Delivery) {
	end := store.DeliveryEnd{ID: dl.ID, CallID: dl.CallID, Owner: d.cfg.Owner, Attempts: dl.Attempts}
	reason, final := d.send(ctx, dl)
	switch {
	case reason == "":
		end.Outcome = store.Delivered
	case final:
		end.Outcome, end.Reason = store.DeliveryGiveUp, reason
	default:
		end.Outcome, end.Reason = store.DeliveryRetry, reason
		end.Delay = Backoff(d.cfg.InitialBackoff, d.cfg.MaxBackoff, dl.Attempts)
		age := time.Duration((dl.ClaimedAt - dl.CreatedAt) * float64(time.Second))
		if age+end.Delay > d.cfg.RetryFor {
			end.Outcome, end.Delay = store.DeliveryGiveUp, 0
		}
	}
	log := d.cfg.Logger.With(logkey.CallID, dl.CallID, "delivery", dl.ID, logkey.Attempt, dl.Attempts)
	ectx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()
	if err := d.st.EndDelivery(ectx, end); err != nil {
		// Unrecorded: the lease lapses and the delivery is sent again, with
		// the same id (at least once).
		log.Warn("webhook delivery attempt not recorded", logkey.Err, err)
		return
	}
	switch end.Outcome {
	case store.Delivered:
		d.m.outcomes.WithLabelValues(outcomeDelivered).Inc()
		log.Debug("webhook delivered")
	case store.DeliveryRetry:
		d.m.outcomes.WithLabelValues(outcomeFailed).Inc()
		log.Info("webhook delivery failed, retry scheduled", "reason", reason, logkey.DurationAttr(logkey.RetryIn, end.Delay))
	default:
		d.m.outcomes.WithLabelValues(outcomeGivenUp).Inc()
		log.Warn("webhook delivery given up", "reason", reason)
	}
}

// send POSTs dl's call to its URL. reason is "" when the receiver
// answered 2xx, else why not; final says no later attempt can do better.
func (d *Deliverer) send(ctx context.Context, dl store.Delivery) (reason string, final bool) {
	secret, err := d.cfg.Allow.secret(dl.URL)
	if err != nil {
		return "the url is no longer allowed: " + err.Error(), true
	}
	call, err := d.st.GetAny(ctx, dl.CallID)
	if err != nil {
		return "the call could not be read: " + errorClass(err), errors.Is(err, store.ErrNotFound)
	}
	if !call.Status.Final() {
		// A same-key retry or a redrive reset the call after this end;
		// its next final state gets a delivery of its own.
		return "the call is " + string(call.Status) + " again; its next final state is delivered on its own", true
	}
	body, err := json.Marshal(callview.Of(call))
	if err != nil {
		return "the call could not be encoded", true
	}
	rctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, dl.URL, bytes.NewReader(body))
	if err != nil {
		return "the request could not be made", true
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "idemctl-webhook")
	req.Header.Set(wire.HeaderIdempotencyKey, dl.ID)
	req.Header.Set(wire.HeaderCallID, dl.CallID)
	req.Header.Set(wire.HeaderSignature, wire.SignWebhook(secret, time.Now(), body))
	res, err := d.cfg.Client.Do(req)
	if err != nil {
		return "no answer: " + transportReason(err), false
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
	if res.StatusCode/100 == 2 {
		return "", false
	}
	if res.StatusCode/100 == 3 {
		return fmt.Sprintf("the receiver answered %d (redirects are not followed)", res.StatusCode), false
	}
	return fmt.Sprintf("the receiver answered %d", res.StatusCode), false
}

// Backoff is the wait after the attempt-th failed attempt: initial,
// doubled per attempt, at most max.
func Backoff(initial, max time.Duration, attempt int64) time.Duration {
	d := initial
	for i := int64(1); i < attempt && d < max; i++ {
		d *= 2
	}
	return min(d, max)
}

// transportReason is a short reason for a request that got no answer: a
// timeout, or the error's innermost text (which names no secret: the
// request carries none but its signature).
func transportReason(err error) string {
	var te interface{ Timeout() bool }
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &te) && te.Timeout()) {
		return "timed out"
	}
	for {
		u := errors.Unwrap(err)
		if u == nil {
			return err.Error()
		}
		err = u
	}
}

func errorClass(err error) string {
	switch {
	case errors.Is(err, store.ErrNotFound):
		return "not found (purged)"
	case errors.Is(err, store.ErrUnavailable):
		return "database unavailable"
	}
	return "store error"
}
