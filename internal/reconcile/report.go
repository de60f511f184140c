package reconcile

import (
	"fmt"
	"io"
	"time"
)

// WriteText prints the report for a person: one line per discrepancy,
// then the verdict (AGREE or DIFFERS) with the counts.
func (r Report) WriteText(w io.Writer) error {
	p := &printer{w: w}
	p.printf("reconcile %s since %s: %d downstream record(s), %d effect(s) here\n",
		r.Tool, r.Since.Format(time.RFC3339), r.Records, r.Effects)
	for _, u := range r.NoEffect {
		key := u.Key
		if key == "" {
			key = "(none)"
		}
		whose := "no call here sent this key"
		if u.Call != nil {
			whose = fmt.Sprintf("call %s is %s", u.Call.CallID, u.Call.Status)
			if u.Call.Code != "" {
				whose += " (" + u.Call.Code + ")"
			}
		}
		p.printf("record without effect: key %s, %s: %s\n", key, whose, u.Record.Record)
	}
	for _, e := range r.NoRecord {
		p.printf("effect without record: %s of call %s (%s): the downstream lists no record with this key\n",
			e.EffectID, e.CallID, e.At.UTC().Format(time.RFC3339))
	}
	for _, s := range r.SharedKeys {
		call := "no call here"
		if s.CallID != "" {
			call = "call " + s.CallID
		}
		p.printf("shared key: %d records made with key %s (%s): the downstream did not honour it\n", len(s.Records), s.Key, call)
	}
	for _, h := range r.Held {
		says := "no record: the effect did not happen; settle it with idemctl resolve " + h.CallID + " --failed"
		switch {
		case h.Records == 1:
			says = "1 record: the effect happened; settle it with idemctl resolve " + h.CallID + " --succeeded"
		case h.Records > 1:
			says = fmt.Sprintf("%d records: the effect happened more than once", h.Records)
		}
		p.printf("held: call %s (outcome_unknown, key %s): the downstream has %s\n", h.CallID, h.EffectID, says)
	}
	verdict := "AGREE"
	if !r.Agree {
		verdict = "DIFFERS"
	}
	p.printf("%s %s: %d record(s) without effect, %d effect(s) without record, %d shared key(s), %d held call(s)\n",
		verdict, r.Tool, len(r.NoEffect), len(r.NoRecord), len(r.SharedKeys), len(r.Held))
	return p.err
}

// printer keeps the first write error.
type printer struct {
	w   io.Writer
	err error
}

func (p *printer) printf(format string, a ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, format, a...)
	}
}
