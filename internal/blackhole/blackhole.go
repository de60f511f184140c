// Package blackhole is a loopback TCP proxy that can be cut off from its
// upstream the way a network partition cuts a host off: while partitioned
// it forwards no byte in either direction and answers nothing, yet resets
// and closes nothing either. Every connection stays open on both sides,
// new connections are accepted and held, and the bytes read meanwhile wait
// in the proxy. Heal delivers them and forwarding resumes, as TCP would
// after its retransmissions got through.
//
// A refused or reset connection is the easy case for a client (an error
// at once); a peer that stops answering is the one only timeouts catch,
// which is why `idemctl soak --pg-partition` puts one of these between
// each server and its database.
package blackhole

import (
	"errors"
	"io"
	"net"
	"sync"
)

// Proxy forwards connections accepted on a loopback address to an
// upstream address.
type Proxy struct {
	ln       net.Listener
	network  string // of the upstream: "tcp" or "unix"
	upstream string

	mu     sync.Mutex
	cut    bool
	healed chan struct{} // closed by Heal; replaced by Partition
	closed bool
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

// Listen starts a proxy on 127.0.0.1 (a free port) to upstream, dialled
// with network ("tcp" or "unix") for each accepted connection.
func Listen(network, upstream string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	healed := make(chan struct{})
	close(healed)
	p := &Proxy{ln: ln, network: network, upstream: upstream, healed: healed, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's listening address ("127.0.0.1:PORT").
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Partition stops all forwarding until Heal.
func (p *Proxy) Partition() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.cut {
		p.cut = true
		p.healed = make(chan struct{})
	}
}

// Heal resumes forwarding, the bytes held meanwhile first.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		p.cut = false
		close(p.healed)
	}
}

// Partitioned reports whether the proxy is cut off.
func (p *Proxy) Partitioned() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cut
}

// gate returns a channel that is closed while the proxy forwards.
func (p *Proxy) gate() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.healed
}

// Close stops listening and closes every connection (a partition is
// healed first, so nothing waits on it).
func (p *Proxy) Close() error {
	p.Heal()
	err := p.ln.Close()
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, c)
	_ = c.Close()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		if !p.track(c) {
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// serve forwards one connection. While partitioned it is held before the
// upstream is even dialled: the connect succeeds (the kernel accepts it),
// and then nothing answers.
func (p *Proxy) serve(down net.Conn) {
	defer p.wg.Done()
	defer p.untrack(down)
	<-p.gate()
	up, err := net.Dial(p.network, p.upstream)
	if err != nil {
		return // an upstream that refuses is refused downstream too
	}
	if !p.track(up) {
		return
	}
	defer p.untrack(up)
	done := make(chan struct{}, 2)
	go func() { p.pipe(up, down); done <- struct{}{} }()
	go func() { p.pipe(down, up); done <- struct{}{} }()
	<-done
	// One side ended: end the other (after a partition heals, like the
	// FIN it would carry).
	<-p.gate()
	_ = up.Close()
	_ = down.Close()
	<-done
}

// pipe copies src to dst, holding every chunk (and the end of the stream)
// while the proxy is partitioned.
func (p *Proxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			<-p.gate()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				return
			}
			<-p.gate()
			if cw, ok := dst.(interface{ CloseWrite() error }); ok {
				_ = cw.CloseWrite()
			}
			return
		}
	}
}
