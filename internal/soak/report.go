package soak

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"
)

// maxListed caps the violations printed per check; the count says the rest.
const maxListed = 20

// print writes the figures and the verdict.
func (r *run) print(rep *Report, in Input) {
	w := r.o.Out
	var ok, conflict, backp, unavailable, fivexx, otherStatus, noAnswer int
	for _, a := range in.Attempts {
		switch {
		case !a.Answered():
			noAnswer++
		case a.OK():
			ok++
		case a.HTTP == 409:
			conflict++
		case backPressure(a):
			backp++
		case a.HTTP == 503:
			unavailable++
		case a.HTTP >= 500:
			fivexx++
		default:
			otherStatus++
		}
	}
	fmt.Fprintf(w, "--- figures ---\n")
	fmt.Fprintf(w, "requests=%d  2xx=%d  409=%d  back-pressure(408/429/503 overloaded)=%d  503 unavailable=%d  other 5xx=%d  other=%d  no answer=%d\n",
		len(in.Attempts), ok, conflict, backp, unavailable, fivexx, otherStatus, noAnswer)
	c := r.cnt
	fmt.Fprintf(w, "operations: new=%d  same-key retries=%d (of acknowledged keys %d, of unanswered keys %d)  different payload=%d\n",
		c.ops[OpNew].Load(), c.ops[OpRetry].Load(), c.retryAcked.Load(), c.retryUnansw.Load(), c.ops[OpConflict].Load())
	acked := ackedCalls(in.Attempts)
	unanswered, recorded := 0, 0
	for _, k := range in.Keys {
		if _, ok := acked[k.Key]; !ok {
			unanswered++
			if _, found := in.Observed.Calls[k.Key]; found {
				recorded++
			}
		}
	}
	fmt.Fprintf(w, "keys=%d  acknowledged=%d  never acknowledged=%d (recorded all the same: %d)  calls found=%d\n",
		len(in.Keys), len(acked), unanswered, recorded, len(in.Observed.Calls))
	if r.own() {
		var exits, restarts int
		for _, e := range in.Events {
			switch e.Kind {
			case EventExit:
				exits++
			case EventUp:
				restarts++
			}
		}
		f := r.faults
		fmt.Fprintf(w, "faults=%d: kills=%d  crash hooks=%d (exits with status 3: %d)  pg-terminate=%d  pg-restart=%d;  exits seen=%d  restarts=%d\n",
			r.inflicted, f.kills, f.crashHooks, f.crashes, f.terminated, f.restarts, exits, restarts)
	}
	if r.own() && (r.o.Pauses || r.o.PGPartition) {
		r.printPauses(in)
	}
	if r.own() {
		r.printDowntime(in)
	}
	r.printAttempts(in)
	if len(in.Observed.Gates) > 0 {
		// A tool's row exists once a claim was admitted through it.
		var parts []string
		for _, g := range in.Observed.Gates {
			parts = append(parts, fmt.Sprintf("%s breaker=%s failures-in-a-row=%d tokens=%.1f", g.Tool, g.Breaker, g.Failures, g.Tokens))
		}
		fmt.Fprintf(w, "gates (database): %s\n", strings.Join(parts, ";  "))
	}
	state := "drained"
	if !r.drained {
		state = "NOT drained"
	}
	fmt.Fprintf(w, "load=%.1fs  drain=%.2fs (%s)\n", r.loadTime.Seconds(), r.drainTime.Seconds(), state)
	r.printResources()
	if r.own() {
		fmt.Fprintf(w, "ledger: %d charge(s) in the downstream, %d in %s's (%d answer(s) lost)\n",
			len(in.Observed.Ledger), len(in.Observed.LookupLedger), LookupTool, r.lookupDS.Lost())
	}

	fmt.Fprintf(w, "--- checks ---\n")
	for _, ch := range rep.Checks {
		switch {
		case ch.Skipped != "":
			fmt.Fprintf(w, "SKIP %s: %s\n", ch.Name, ch.Skipped)
		case !ch.Failed():
			fmt.Fprintf(w, "PASS %s: %s (%d checked)\n", ch.Name, ch.What, ch.Checked)
		default:
			fmt.Fprintf(w, "FAIL %s: %s — %d violation(s) of %d checked\n", ch.Name, ch.What, len(ch.Violations), ch.Checked)
			for i, v := range ch.Violations {
				if i == maxListed {
					fmt.Fprintf(w, "  ... and %d more\n", len(ch.Violations)-maxListed)
					break
				}
				fmt.Fprintf(w, "  %s: %s\n", v.Key, v.Detail)
			}
		}
	}
	verdict := "PASS"
	if rep.Failed() {
		verdict = "FAIL"
	}
	fmt.Fprintf(w, "%s soak: seed %d; replay: %s --seed %d\n", verdict, rep.Seed, r.o.Command, rep.Seed)
}

// printPauses prints the pause and partition faults: how many, the calls
// the pauses froze and how many of those were taken over and fenced, and
// how long partitioned instances took to answer and to serve again.
func (r *run) printPauses(in Input) {
	f := r.faults
	frozen, taken, fenced := 0, 0, 0
	for _, p := range in.Pauses {
		for _, h := range p.Calls {
			frozen++
			rows := in.Observed.Audit[h.CallID]
			for _, row := range rows {
				if row.Event == "recover" && strings.Contains(row.Detail, fmt.Sprintf("(owner %s, attempt %d)", h.Owner, h.Attempt)) {
					taken++
				}
				if row.Event == "fenced" && strings.HasPrefix(row.Detail, fmt.Sprintf("owner %s attempt %d refused", h.Owner, h.Attempt)) {
					fenced++
				}
			}
		}
	}
	var answer, resume time.Duration
	resumed := map[string]bool{}
	for _, p := range in.Probes {
		switch {
		case p.During && p.HTTP != 0:
			answer = max(answer, p.End-p.Start)
		case !p.During && p.HTTP/100 == 2 && !resumed[p.Key]:
			resumed[p.Key] = true
			resume = max(resume, p.End-p.Healed)
		}
	}
	fmt.Fprintf(r.o.Out, "pauses=%d (calls frozen while running: %d, taken over: %d, late completions fenced: %d)  pg-partitions=%d (slowest answer while partitioned %.2fs, slowest new key acknowledged after the heal %.2fs)\n",
		f.pauses, frozen, taken, fenced, f.partitions, answer.Seconds(), resume.Seconds())
}

// printDowntime prints how long instances were down: from a kill or an
// exit to serving again (restart and /readyz).
func (r *run) printDowntime(in Input) {
	var spans []time.Duration
	var exits []Event // a pause is not a restart: its window is not downtime here
	for _, e := range in.Events {
		if e.Kind != EventPause {
			exits = append(exits, e)
		}
	}
	for _, ws := range downWindows(exits) {
		for _, w := range ws {
			if w.to < time.Duration(math.MaxInt64) {
				spans = append(spans, w.to-w.from)
			}
		}
	}
	if len(spans) == 0 {
		return
	}
	slices.Sort(spans)
	var total time.Duration
	for _, d := range spans {
		total += d
	}
	fmt.Fprintf(r.o.Out, "downtime per kill or crash: median %.2fs  max %.2fs  total %.1fs over %d restarts\n",
		spans[len(spans)/2].Seconds(), spans[len(spans)-1].Seconds(), total.Seconds(), len(spans))
}

// printAttempts prints how many executions the soak's calls needed.
func (r *run) printAttempts(in Input) {
	dist := map[int64]int{}
	for _, c := range in.Observed.Calls {
		dist[c.Attempt]++
	}
	var ns []int64
	for n := range dist {
		ns = append(ns, n)
	}
	sort.Slice(ns, func(i, j int) bool { return ns[i] < ns[j] })
	parts := make([]string, 0, len(ns))
	for _, n := range ns {
		parts = append(parts, fmt.Sprintf("%d:%d", n, dist[n]))
	}
	fmt.Fprintf(r.o.Out, "attempt distribution (attempt:calls): %s\n", strings.Join(parts, "  "))
}

// printResources prints the WAL and RSS series in brief.
func (r *run) printResources() {
	n := 0
	if r.inst != nil {
		n = len(r.inst.procs)
	}
	samples := r.samp.all()
	if len(samples) == 0 || n == 0 {
		return
	}
	for _, g := range growths(samples, n) {
		if g.Samples == 0 {
			continue
		}
		if !g.Judged {
			fmt.Fprintf(r.o.Out, "%s: %d sample(s), max %s\n", g.Name, g.Samples, mib(seriesMax(samples, g.Name)))
			continue
		}
		fmt.Fprintf(r.o.Out, "%s: %d samples, first third max %s, last third max %s\n", g.Name, g.Samples, mib(g.FirstMax), mib(g.LastMax))
	}
}

func seriesMax(samples []Sample, name string) int64 {
	var m int64
	for _, s := range samples {
		if name == "wal" {
			m = max(m, s.WAL)
			continue
		}
		var i int
		if _, err := fmt.Sscanf(name, "rss[%d]", &i); err == nil && i < len(s.RSS) {
			m = max(m, s.RSS[i])
		}
	}
	return m
}
