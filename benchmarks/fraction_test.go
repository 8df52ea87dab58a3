package benchmarks

// The fraction of the server-only bound each side reaches, in the same
// round:
//
//	cd benchmarks && go test -run '^$' -bench '^BenchmarkBoundFraction$' -benchtime 30000x -count 3 -timeout 90m
//
// Each round (one run of the benchmark: -count rounds) drains b.N no-op
// jobs on each side, each on a fresh database of the same cluster, in an
// order that turns by one side a round (so no side is always first or
// last on a machine whose load changes): the server-only bound
// (BenchmarkServerBound's probe on 2 backends, Run's 2 workers) at
// Retention -1 ("bound", the denominator) and at the default retention
// ("bound.default"), pgrouter's Run (2 workers) at Retention -1 and at
// the default, and River at MaxWorkers 100 and 1000 (1 ms fetches).
// Each side reports <side>-jobs/s (the drain alone, as each side's own
// benchmark times it) and <side>/bound, its rate over the bound's of the
// same round. Rates are noisy on a busy machine: compare the fractions
// of a round, across several rounds. A machine busy with other work also
// skews them: the scheduler shares the cores among runnable processes,
// and the sides run different numbers of them (the bound 2 backends;
// pgrouter and River their client too). So each side also reports the
// CPU time its drain cost per job, <side>-server-CPU-us/job (every
// process of the cluster) and <side>-client-CPU-us/job (this process),
// and <side>/bound-CPU, the bound's CPU per job over the side's: the
// fraction of the bound's rate the side would reach on cores it had to
// itself, if both were bound by CPU. The log gives each side's figures
// as the round runs.

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/leaserouter/leaserouter/internal/cputime"
	"github.com/leaserouter/leaserouter/pgrouter/pgtest"
)

// boundSides are the sides of BenchmarkBoundFraction; the first is the
// bound. Each drains n jobs on db, with w measuring the drain.
var boundSides = []struct {
	name  string
	drain func(tb testing.TB, db *pgxpool.Pool, n int, w window) float64 // jobs/s
}{
	{"bound", func(tb testing.TB, db *pgxpool.Pool, n int, w window) float64 {
		r, _ := serverBoundJobs(tb, db, n, dbWorkers, 0, w)
		return r
	}},
	{"bound.default", func(tb testing.TB, db *pgxpool.Pool, n int, w window) float64 {
		r, _ := serverBoundJobs(tb, db, n, dbWorkers, boundRetentions[0].keepUS, w)
		return r
	}},
	{"pgrouter.ret-1", func(tb testing.TB, db *pgxpool.Pool, n int, w window) float64 {
		return pgrouterRate(tb, db, n, -1, w)
	}},
	{"pgrouter.default", func(tb testing.TB, db *pgxpool.Pool, n int, w window) float64 {
		return pgrouterRate(tb, db, n, 0, w)
	}},
	{"river.100", func(tb testing.TB, db *pgxpool.Pool, n int, w window) float64 { return riverRate(tb, db, n, 100, w) }},
	{"river.1000", func(tb testing.TB, db *pgxpool.Pool, n int, w window) float64 { return riverRate(tb, db, n, 1000, w) }},
}

// boundRounds counts the rounds run, to turn their order.
var boundRounds atomic.Int64

// BenchmarkBoundFraction: each side's jobs/s and its fraction of the
// server-only bound, in the same round.
func BenchmarkBoundFraction(b *testing.B) {
	round := boundRounds.Load()
	if b.N > 1 { // not the single job of the first run: the next round
		round = boundRounds.Add(1)
	}
	for name, v := range boundRound(b, b.N, int(round)) {
		b.ReportMetric(v, name)
	}
}

// TestBoundFractionRound runs a round of BenchmarkBoundFraction on a few
// jobs: every side drains them, and every figure is there.
func TestBoundFractionRound(t *testing.T) {
	m := boundRound(t, 300, 1)
	for _, s := range boundSides {
		require.Positive(t, m[s.name+"-jobs/s"], s.name)
		require.Positive(t, m[s.name+"/bound"], s.name)
	}
	require.Equal(t, 1.0, m["bound/bound"])
	if _, err := cputime.Server(pgtest.New(t).Config().ConnConfig.Host); err == nil { // a local cluster, on Linux
		for _, s := range boundSides {
			require.Contains(t, m, s.name+"-server-CPU-us/job")
		}
	}
}

// boundRound drains n jobs on each side, starting at side round mod the
// number of sides, and returns each side's figures, as metrics by unit:
// jobs/s and its fraction of the bound's, and (when the cluster's CPU
// time can be read) CPU microseconds per job, server and client, and the
// bound's CPU per job over the side's.
func boundRound(tb testing.TB, n, round int) map[string]float64 {
	m := map[string]float64{}
	cpu := map[string]*cpuMeter{}
	for i := range boundSides {
		s := boundSides[(round+i)%len(boundSides)]
		start := time.Now()
		db := pgtest.New(tb)
		cpu[s.name] = &cpuMeter{db: db}
		m[s.name+"-jobs/s"] = s.drain(tb, db, n, cpu[s.name])
		if b, ok := tb.(*testing.B); ok && n > 1 {
			b.Logf("round %d: %s %.0f jobs/s, CPU/job server %v client %v (%s with its setup)", round, s.name,
				m[s.name+"-jobs/s"], cpu[s.name].server, cpu[s.name].client, time.Since(start).Round(time.Millisecond))
		}
	}
	bound, boundCPU := m[boundSides[0].name+"-jobs/s"], cpu[boundSides[0].name]
	for _, s := range boundSides {
		m[s.name+"/bound"] = m[s.name+"-jobs/s"] / bound
		if c := cpu[s.name]; c.ok {
			m[s.name+"-server-CPU-us/job"] = float64(c.server) / 1e3
			m[s.name+"-client-CPU-us/job"] = float64(c.client) / 1e3
			if boundCPU.ok && c.perJob() > 0 {
				m[s.name+"/bound-CPU"] = float64(boundCPU.perJob()) / float64(c.perJob())
			}
		}
	}
	return m
}
