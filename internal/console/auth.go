package console

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/idemctl/idemctl/internal/store"
	"github.com/idemctl/idemctl/internal/wire"
)

// Cookie names. Both are HttpOnly, SameSite=Strict, scoped to /ui, and
// Secure when the request came over HTTPS (TLS on the connection, or a
// trusted proxy's X-Forwarded-Proto: Config.HTTPS).
const (
	// SessionCookie holds the id of a server-side session (sessions.go),
	// never the token. Only /ui pages read it; the API does not.
	SessionCookie = "idemctl_session"
	// CSRFCookie holds a random nonce per browser session; the CSRF token
	// of the console's forms is derived from it (csrfFor).
	CSRFCookie = "idemctl_csrf"
	// CSRFField is the forms' hidden field.
	CSRFField = "csrf"
)

// session is who a console request is from.
type session struct {
	principal string
	// csrfKey keys the CSRF token of the request's forms: the bearer
	// token, the sign-in session's own secret, or "" without auth.
	csrfKey string
	// id is the sign-in session's id; "" for a bearer header or without
	// auth (no sign-out button then).
	id string
}

type sessionKey struct{}

func sessionOf(r *http.Request) *session {
	s, _ := r.Context().Value(sessionKey{}).(*session)
	return s
}

// principalOf is the request's principal (authed has run).
func principalOf(r *http.Request) string {
	if s := sessionOf(r); s != nil {
		return s.principal
	}
	return store.DefaultPrincipal
}

// authed runs h for an authenticated request. Without Authenticate every
// request is the default principal. With it, the bearer header comes
// first (as in the API: a wrong one is 401, never a fallback to the
// cookie), then the sign-in session; a request with neither, or whose
// session has ended or whose token is no longer accepted, is sent to the
// sign-in page (a GET) or refused (401). A client throttled for failed
// authentications (Config.AuthLimit) is refused before its header is
// looked at.
func (c *console) authed(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c.cfg.Authenticate == nil {
			h(w, r.WithContext(context.WithValue(r.Context(), sessionKey{}, &session{})))
			return
		}
		if hdr := r.Header.Get(wire.HeaderAuthorization); hdr != "" {
			if !c.allowAttempt(w, r) {
				return
			}
			token, ok := wire.BearerToken(hdr)
			principal, known := "", false
			if ok {
				principal, known = c.cfg.Authenticate(sha256.Sum256([]byte(token)))
			}
			if !known {
				c.failed(r)
				w.Header().Set(wire.HeaderWWWAuthenticate, `Bearer realm="idemctl", error="invalid_token"`)
				c.fail(w, r, http.StatusUnauthorized, "The Authorization header does not hold a token this server accepts.")
				return
			}
			h(w, r.WithContext(context.WithValue(r.Context(), sessionKey{}, &session{principal: principal, csrfKey: token})))
			return
		}
		if ck, err := r.Cookie(SessionCookie); err == nil && ck.Value != "" {
			if ls, ok := c.sessions.get(ck.Value); ok {
				// The token may have been revoked (token file reloaded)
				// since the sign-in: then the session ends here.
				if principal, known := c.cfg.Authenticate(ls.tokenHash); known {
					h(w, r.WithContext(context.WithValue(r.Context(), sessionKey{},
						&session{principal: principal, csrfKey: ls.csrfKey, id: ck.Value})))
					return
				}
				c.sessions.end(ck.Value)
			}
			// Ended, expired, revoked or from before a restart: a stale
			// cookie, not a guess, so it is not throttled.
			c.cfg.AuthFailed("unknown")
			c.clearCookies(w, r)
		} else {
			c.cfg.AuthFailed("missing")
		}
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			http.Redirect(w, r, Prefix+"/signin?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		c.fail(w, r, http.StatusUnauthorized, "Sign in first.")
	})
}

// allowAttempt is false, with the 429 page written, when the client has
// failed to authenticate too often lately (Config.AuthLimit).
func (c *console) allowAttempt(w http.ResponseWriter, r *http.Request) bool {
	wait, ok := c.cfg.AuthLimit.Check(r)
	if ok {
		return true
	}
	w.Header().Set(wire.HeaderRetryAfter, strconv.Itoa(int(wait.Round(time.Second)/time.Second)))
	c.fail(w, r, http.StatusTooManyRequests, "Too many failed sign-ins from your address; try again in "+
		wait.Round(time.Second).String()+".")
	return false
}

// failed records a refused credential: metrics and the throttle.
func (c *console) failed(r *http.Request) {
	c.cfg.AuthFailed("unknown")
	c.cfg.AuthLimit.Failed(r)
}

func (c *console) setCookie(w http.ResponseWriter, r *http.Request, name, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{
		Name: name, Value: value, Path: Prefix, MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: c.cfg.HTTPS(r),
	})
}

func (c *console) clearCookies(w http.ResponseWriter, r *http.Request) {
	c.setCookie(w, r, SessionCookie, "", -1)
	c.setCookie(w, r, CSRFCookie, "", -1)
}

// csrfToken is the CSRF token for the forms of this response: derived
// from the browser's nonce cookie (set here when missing) and the
// request's credential, so a page can post only with the nonce cookie a
// same-site request carries and, with auth, only for the session or token
// that rendered it.
func (c *console) csrfToken(w http.ResponseWriter, r *http.Request, s *session) string {
	nonce := ""
	if ck, err := r.Cookie(CSRFCookie); err == nil && validNonce(ck.Value) {
		nonce = ck.Value
	} else {
		nonce = newNonce()
		c.setCookie(w, r, CSRFCookie, nonce, 0)
		// The form must verify against the cookie the browser will hold.
		r.AddCookie(&http.Cookie{Name: CSRFCookie, Value: nonce})
	}
	return csrfFor(s.csrfKey, nonce)
}

func newNonce() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

func validNonce(v string) bool {
	if len(v) != 32 {
		return false
	}
	_, err := hex.DecodeString(v)
	return err == nil
}

// csrfFor is HMAC-SHA256(key, nonce): without a key (auth off) it still
// binds the form to the nonce cookie, which a cross-site request neither
// sends (SameSite=Strict) nor can read (HttpOnly).
func csrfFor(key, nonce string) string {
	m := hmac.New(sha256.New, []byte("idemctl console csrf\x00"+key))
	m.Write([]byte(nonce))
	return hex.EncodeToString(m.Sum(nil))
}

// checkPost refuses a state-changing request that is not from the
// console's own page: a cross-site Sec-Fetch-Site or Origin, or a missing
// or wrong CSRF token (compared in constant time). ok false means the
// 403 page has been written and nothing was done.
func (c *console) checkPost(w http.ResponseWriter, r *http.Request, needToken bool) bool {
	if !sameOrigin(r) {
		c.fail(w, r, http.StatusForbidden, "This form must be sent from the console's own page.")
		return false
	}
	if !needToken {
		return true
	}
	s := sessionOf(r)
	ck, err := r.Cookie(CSRFCookie)
	got := r.PostFormValue(CSRFField)
	if s == nil || err != nil || !validNonce(ck.Value) || got == "" ||
		!hmac.Equal([]byte(got), []byte(csrfFor(s.csrfKey, ck.Value))) {
		c.fail(w, r, http.StatusForbidden, "The form's security token is missing or wrong (reload the page and try again). Nothing was changed.")
		return false
	}
	return true
}

// sameOrigin: a browser says where a request comes from with
// Sec-Fetch-Site and Origin; either, when present, must be this site.
func sameOrigin(r *http.Request) bool {
	if sfs := r.Header.Get("Sec-Fetch-Site"); sfs != "" && sfs != "same-origin" && sfs != "none" {
		return false
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || u.Host != r.Host {
			return false
		}
	}
	return true
}

type signinData struct {
	Next    string
	Message string
	// Idle and Lifetime are the session's limits, as the page says them.
	Idle, Lifetime string
}

func (c *console) signinData(next, msg string) signinData {
	return signinData{Next: next, Message: msg, Idle: humanDuration(c.cfg.SessionIdle), Lifetime: humanDuration(c.cfg.SessionLifetime)}
}

// humanDuration says a session limit in words: "12 hours", "7 days".
func humanDuration(d time.Duration) string {
	unit, n := "minute", int64(d/time.Minute)
	switch {
	case d >= 24*time.Hour && d%(24*time.Hour) == 0:
		unit, n = "day", int64(d/(24*time.Hour))
	case d >= time.Hour && d%time.Hour == 0:
		unit, n = "hour", int64(d/time.Hour)
	}
	if n != 1 {
		unit += "s"
	}
	return strconv.FormatInt(n, 10) + " " + unit
}

// safeNext is where to go after signing in: a console page, never
// another site.
func safeNext(next string) string {
	if next == Prefix || (strings.HasPrefix(next, Prefix+"/") && !strings.ContainsAny(next, "\\") &&
		!strings.HasPrefix(next, Prefix+"/signin")) {
		return next
	}
	return Prefix
}

// signinPage is GET /ui/signin: the form (without auth there is nothing
// to sign in to: the overview).
func (c *console) signinPage(w http.ResponseWriter, r *http.Request) {
	next := safeNext(r.URL.Query().Get("next"))
	if c.cfg.Authenticate == nil {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	c.render(w, r, http.StatusOK, "signin.html", page{Title: "Sign in", Data: c.signinData(next, "")})
}

// signin is POST /ui/signin: a token the server accepts starts a
// server-side session whose id the cookie keeps, with a fresh CSRF nonce;
// a wrong one shows the form again (401), never echoing what was typed,
// and counts against the client's failure budget (429 once spent).
func (c *console) signin(w http.ResponseWriter, r *http.Request) {
	if c.cfg.Authenticate == nil {
		http.Redirect(w, r, Prefix, http.StatusSeeOther)
		return
	}
	if !c.checkPost(w, r, false) || !c.allowAttempt(w, r) {
		return
	}
	next := safeNext(r.PostFormValue("next"))
	token := strings.TrimSpace(r.PostFormValue("token"))
	hash := sha256.Sum256([]byte(token))
	principal, ok := c.cfg.Authenticate(hash)
	if token == "" || !ok {
		c.failed(r)
		c.render(w, r, http.StatusUnauthorized, "signin.html", page{Title: "Sign in",
			Data: c.signinData(next, "This server does not accept that token.")})
		return
	}
	c.setCookie(w, r, SessionCookie, c.sessions.create(principal, hash), 0)
	c.setCookie(w, r, CSRFCookie, newNonce(), 0)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// signout is POST /ui/signout: the session ends on the server (its
// cookie, replayed, opens nothing) and both cookies are cleared.
func (c *console) signout(w http.ResponseWriter, r *http.Request) {
	if !c.checkPost(w, r, true) {
		return
	}
	if s := sessionOf(r); s != nil && s.id != "" {
		c.sessions.end(s.id)
	}
	c.clearCookies(w, r)
	http.Redirect(w, r, Prefix+"/signin", http.StatusSeeOther)
}
