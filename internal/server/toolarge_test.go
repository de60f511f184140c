package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/wire"
)

// TestOversizedBodyAnswered413 sends a body over MaxBodyBytes the way
// urllib does (Connection: close, the whole body is written before the answer is read, on a
// fresh connection each time). Every attempt must read 413
// payload_too_large; an answer written before the body was read, followed
// by a close with the body unread, resets the connection and the client
// loses the answer.
func TestOversizedBodyAnswered413(t *testing.T) {
	b := setup(t)
	padding := bytes.Repeat([]byte("x"), MaxBodyBytes+512<<10)
	body := append(append([]byte(`{"tool":"charge","args":{"amount":1,"pad":"`), padding...), `"}}`...)
	for _, chunked := range []bool{false, true} {
		for attempt := range 5 {
			status, code, err := rawPost(b.ts.Listener.Addr().String(), "k-huge-"+strconv.Itoa(attempt), body, chunked)
			if err != nil {
				t.Fatalf("chunked=%v attempt %d: %v, want 413 payload_too_large", chunked, attempt, err)
			}
			if status != http.StatusRequestEntityTooLarge || code != wire.CodePayloadTooLarge {
				t.Fatalf("chunked=%v attempt %d: %d %s, want 413 payload_too_large", chunked, attempt, status, code)
			}
		}
	}
	if st := b.stats(); st.Calls != 0 {
		t.Fatalf("oversized bodies recorded %d calls", st.Calls)
	}
}

// rawPost writes a whole POST (headers and body) on a new connection, then
// reads the answer: its status and error code.
func rawPost(addr, key string, body []byte, chunked bool) (int, string, error) {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return 0, "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(waitDeadline))
	// The head goes out first and the body after it, in pieces, as
	// urllib sends them: the server can answer between the two.
	head := "POST /v1/tool-calls HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: application/json\r\nIdempotency-Key: " + key + "\r\n"
	var req bytes.Buffer
	if chunked {
		head += "Transfer-Encoding: chunked\r\n\r\n"
		for rest := body; len(rest) > 0; {
			n := min(len(rest), 64<<10)
			req.WriteString(strconv.FormatInt(int64(n), 16) + "\r\n")
			req.Write(rest[:n])
			req.WriteString("\r\n")
			rest = rest[n:]
		}
		req.WriteString("0\r\n\r\n")
	} else {
		head += "Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n"
		req.Write(body)
	}
	if _, err := io.WriteString(conn, head); err != nil {
		return 0, "", err
	}
	for rest := req.Bytes(); len(rest) > 0; {
		n := min(len(rest), 16<<10)
		if _, err := conn.Write(rest[:n]); err != nil {
			return 0, "", err
		}
		rest = rest[n:]
	}
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0, "", err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		return res.StatusCode, "", err
	}
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(raw, &e)
	return res.StatusCode, e.Error.Code, nil
}
