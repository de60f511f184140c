package chaos

import (
	"errors"
	"fmt"
)

// SelectorKind says how a Selector picks requests.
type SelectorKind int

// Selector kinds. The zero value picks every request.
const (
	// SelectAll picks every request.
	SelectAll SelectorKind = iota
	// SelectFirst picks requests 1..N.
	SelectFirst
	// SelectEvery picks requests N, 2N, 3N, ...
	SelectEvery
	// SelectProb picks each request independently with probability P.
	SelectProb
)

// Selector picks which requests the proxy's mode applies to. Requests are
// numbered from 1 in arrival order, whatever their method or path.
type Selector struct {
	Kind SelectorKind
	// N is the count of SelectFirst and SelectEvery.
	N int64
	// P is the probability of SelectProb, in [0, 1].
	P float64
}

// First picks requests 1..n.
func First(n int64) Selector { return Selector{Kind: SelectFirst, N: n} }

// Every picks requests n, 2n, 3n, ...
func Every(n int64) Selector { return Selector{Kind: SelectEvery, N: n} }

// Prob picks each request with probability p.
func Prob(p float64) Selector { return Selector{Kind: SelectProb, P: p} }

// All picks every request.
func All() Selector { return Selector{Kind: SelectAll} }

// Validate checks the selector's parameters.
func (s Selector) Validate() error {
	switch s.Kind {
	case SelectAll:
		return nil
	case SelectFirst, SelectEvery:
		if s.N < 1 {
			return fmt.Errorf("selector %s: N must be at least 1", s)
		}
		return nil
	case SelectProb:
		if !(s.P >= 0 && s.P <= 1) { // also refuses NaN
			return fmt.Errorf("selector: probability %v is not in [0, 1]", s.P)
		}
		return nil
	}
	return errors.New("selector: unknown kind")
}

// Hit reports whether request number n (from 1) is picked; rnd returns a
// number in [0, 1) and is only called by SelectProb.
func (s Selector) Hit(n int64, rnd func() float64) bool {
	switch s.Kind {
	case SelectFirst:
		return n <= s.N
	case SelectEvery:
		return n%s.N == 0
	case SelectProb:
		// rnd() < P: P=0 never hits, P=1 always does.
		return rnd() < s.P
	}
	return true
}

func (s Selector) String() string {
	switch s.Kind {
	case SelectFirst:
		return fmt.Sprintf("first %d", s.N)
	case SelectEvery:
		return fmt.Sprintf("every %d", s.N)
	case SelectProb:
		return fmt.Sprintf("prob %g", s.P)
	}
	return "all"
}
