package blackhole

import (
	"bufio"
	"errors"
	"net"
	"os"
	"testing"
	"time"
)

// echo runs an upstream that echoes each line.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader, msg string) {
	t.Helper()
	if _, err := c.Write([]byte(msg + "\n")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := r.ReadString('\n')
	if err != nil || got != msg+"\n" {
		t.Fatalf("echo of %q: %q, %v", msg, got, err)
	}
}

// silent asserts that nothing comes back while partitioned: no byte, no
// reset, no close — the read can only run into its own deadline.
func silent(t *testing.T, c net.Conn, r *bufio.Reader) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	b, err := r.ReadByte()
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("while partitioned the read got byte %q, error %v; want nothing until the deadline", b, err)
	}
}

func TestPartitionHoldsBytesBothWaysAndHealDeliversThem(t *testing.T) {
	p, err := Listen("tcp", echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	roundTrip(t, c, r, "before")

	p.Partition()
	if !p.Partitioned() {
		t.Fatal("Partitioned() is false after Partition")
	}
	if _, err := c.Write([]byte("during\n")); err != nil {
		t.Fatalf("a write into the partition must not fail: %v", err)
	}
	silent(t, c, r)
	// A new connection is accepted and held, not refused.
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatalf("a connect during the partition must succeed: %v", err)
	}
	defer c2.Close()
	r2 := bufio.NewReader(c2)
	if _, err := c2.Write([]byte("new\n")); err != nil {
		t.Fatal(err)
	}
	silent(t, c2, r2)

	p.Heal()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if got, err := r.ReadString('\n'); err != nil || got != "during\n" {
		t.Fatalf("after the heal: %q, %v; want the line held during the partition", got, err)
	}
	_ = c2.SetReadDeadline(time.Now().Add(10 * time.Second))
	if got, err := r2.ReadString('\n'); err != nil || got != "new\n" {
		t.Fatalf("the connection made during the partition, after the heal: %q, %v", got, err)
	}
	roundTrip(t, c, r, "after")
}

func TestCloseEndsHeldConnections(t *testing.T) {
	p, err := Listen("tcp", echo(t))
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	roundTrip(t, c, r, "x")
	p.Partition()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := r.ReadByte(); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("after Close the connection must end, got %v", err)
	}
}
