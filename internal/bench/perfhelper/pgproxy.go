package main

// pgproxy counts what a client asks PostgreSQL to do, without PostgreSQL's
// help (pg_stat_statements needs a server restart to load): a TCP proxy
// that reads the client's side of the wire protocol and counts statements
// and transactions, and which of the transactions wrote. scripts/perf puts
// it between `idemctl serve` and the database, so the figures belong to the
// binary under test whatever it is.

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
)

// wireCounts are the proxy's figures: Statements excludes transaction
// control (BEGIN, COMMIT, ROLLBACK, SAVEPOINT, RELEASE); a transaction is an
// explicit BEGIN … COMMIT, or the implicit one a Sync ends (a pipelined batch
// is one), or a simple Query; it wrote when one of its statements inserts,
// updates or deletes.
type wireCounts struct {
	Statements   int64 `json:"statements"`
	Transactions int64 `json:"transactions"`
	WriteTx      int64 `json:"write_tx"`
}

type wireCounter struct {
	statements, transactions, writeTx atomic.Int64
}

func (c *wireCounter) snapshot() wireCounts {
	return wireCounts{Statements: c.statements.Load(), Transactions: c.transactions.Load(), WriteTx: c.writeTx.Load()}
}

// writeSQL tells a statement that writes rows from one that only reads or
// locks (FOR UPDATE has no SET after a table name; ON CONFLICT DO UPDATE SET
// comes with the INSERT it belongs to).
var writeSQL = regexp.MustCompile(`(?i)\b(insert\s+into|update\s+\S+\s+set|delete\s+from)\b`)

var txControl = regexp.MustCompile(`(?i)^\s*(begin|start\s+transaction|commit|end|rollback|abort|savepoint|release)\b`)

// session follows one client connection's transactions.
type session struct {
	c        *wireCounter
	stmts    map[string]string // prepared statement name → SQL
	portals  map[string]string // portal name → SQL
	explicit bool
	any      bool // a statement ran in the current transaction
	wrote    bool
}

func newSession(c *wireCounter) *session {
	return &session{c: c, stmts: map[string]string{}, portals: map[string]string{}}
}

func (s *session) endTx() {
	if s.any {
		s.c.transactions.Add(1)
		if s.wrote {
			s.c.writeTx.Add(1)
		}
	}
	s.any, s.wrote, s.explicit = false, false, false
}

// statement accounts one statement run; simple says it came as a Query
// message, which is a transaction of its own outside BEGIN … COMMIT.
func (s *session) statement(sql string, simple bool) {
	if m := txControl.FindStringSubmatch(sql); m != nil {
		switch strings.ToLower(strings.Fields(m[1])[0]) {
		case "begin", "start":
			s.explicit = true
		case "commit", "end", "rollback", "abort":
			s.endTx()
		}
		return
	}
	s.c.statements.Add(1)
	s.any = true
	if writeSQL.MatchString(sql) {
		s.wrote = true
	}
	if simple && !s.explicit {
		s.endTx()
	}
}

// message accounts one typed frontend message.
func (s *session) message(typ byte, body []byte) {
	switch typ {
	case 'Q':
		s.statement(cstring(body, 0), true)
	case 'P': // Parse: name, query, …
		name := cstring(body, 0)
		s.stmts[name] = cstring(body, len(name)+1)
	case 'B': // Bind: portal, statement, …
		portal := cstring(body, 0)
		s.portals[portal] = s.stmts[cstring(body, len(portal)+1)]
	case 'E': // Execute: portal, max rows
		s.statement(s.portals[cstring(body, 0)], false)
	case 'S': // Sync ends the implicit transaction of the messages before it
		if !s.explicit {
			s.endTx()
		}
	case 'C': // Close: 'S' statement or 'P' portal, name
		if len(body) > 0 {
			name := cstring(body, 1)
			if body[0] == 'S' {
				delete(s.stmts, name)
			} else {
				delete(s.portals, name)
			}
		}
	}
}

// cstring is the NUL-terminated string at b[off:].
func cstring(b []byte, off int) string {
	if off >= len(b) {
		return ""
	}
	b = b[off:]
	if i := strings.IndexByte(string(b), 0); i >= 0 {
		return string(b[:i])
	}
	return string(b)
}

// Untyped first messages that are not the startup message: the client
// sends the startup message after the server's one-byte answer.
const (
	sslRequestCode    = 80877103
	gssEncRequestCode = 80877104
)

// readClient reads the client's side from r, accounting every message in s
// and copying every byte to w.
func readClient(r io.Reader, w io.Writer, s *session) error {
	br := bufio.NewReader(r)
	var hdr [5]byte
	// The startup phase: untyped messages (length, code, …).
	for {
		if _, err := io.ReadFull(br, hdr[:4]); err != nil {
			return err
		}
		n := int(binary.BigEndian.Uint32(hdr[:4]))
		if n < 8 || n > 1<<20 {
			return fmt.Errorf("pgproxy: startup message of %d bytes", n)
		}
		body := make([]byte, n-4)
		if _, err := io.ReadFull(br, body); err != nil {
			return err
		}
		if _, err := w.Write(append(hdr[:4:4], body...)); err != nil {
			return err
		}
		code := binary.BigEndian.Uint32(body[:4])
		if code != sslRequestCode && code != gssEncRequestCode {
			break
		}
	}
	for {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			return err
		}
		n := int(binary.BigEndian.Uint32(hdr[1:]))
		if n < 4 {
			return fmt.Errorf("pgproxy: message %q of length %d", hdr[0], n)
		}
		body := make([]byte, n-4)
		if _, err := io.ReadFull(br, body); err != nil {
			return err
		}
		s.message(hdr[0], body)
		if _, err := w.Write(append(hdr[:], body...)); err != nil {
			return err
		}
	}
}

// proxyURL is dsn with its host and port replaced by addr: the URL the
// server under test is given.
func proxyURL(dsn, addr string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", errors.New("pgproxy: want a postgres:// URL")
	}
	if q := u.Query(); q.Get("sslmode") != "disable" {
		// The proxy reads the protocol: it cannot read TLS.
		q.Set("sslmode", "disable")
		u.RawQuery = q.Encode()
	}
	u.Host = addr
	return u.String(), nil
}

// runProxy listens on addr, forwards every connection to the database dsn
// names, prints the URL to give the server under test, and at the end (ctx)
// writes the counts as JSON to out.
func runProxy(ctx context.Context, addr, dsn string, stdout io.Writer, out string) error {
	u, err := url.Parse(dsn)
	if err != nil {
		return err
	}
	upstream := u.Host
	if u.Port() == "" {
		upstream = net.JoinHostPort(u.Hostname(), "5432")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	purl, err := proxyURL(dsn, ln.Addr().String())
	if err != nil {
		ln.Close()
		return err
	}
	fmt.Fprintln(stdout, purl)
	var c wireCounter
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := map[net.Conn]bool{}
	go func() {
		<-ctx.Done()
		ln.Close()
		mu.Lock()
		for cn := range conns {
			cn.Close()
		}
		mu.Unlock()
	}()
	for {
		client, err := ln.Accept()
		if err != nil {
			break
		}
		server, err := net.Dial("tcp", upstream)
		if err != nil {
			client.Close()
			continue
		}
		mu.Lock()
		conns[client], conns[server] = true, true
		mu.Unlock()
		wg.Go(func() {
			done := make(chan struct{})
			go func() {
				_, _ = io.Copy(client, server)
				client.Close()
				close(done)
			}()
			_ = readClient(client, server, newSession(&c))
			server.Close()
			<-done
			mu.Lock()
			delete(conns, client)
			delete(conns, server)
			mu.Unlock()
		})
	}
	wg.Wait()
	b, err := json.Marshal(c.snapshot())
	if err != nil {
		return err
	}
	return os.WriteFile(out, append(b, '\n'), 0o644)
}
