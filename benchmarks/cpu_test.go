package benchmarks

import (
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leaserouter/leaserouter/internal/cputime"
)

// window is a measurement over a side's timed part (its drain): started
// before, stopped after, for n jobs.
type window interface {
	start()
	stop(n int)
}

// cpuMeter measures the CPU time a drain costs per job: the server's
// (every process of db's cluster: BenchmarkBoundFraction's sides run one
// at a time, the cluster runs nothing else) and this process's (the
// side's client: pgrouter's Router, River's client). Unknown (ok false)
// when the server is not a local pgtest cluster or the system has no
// /proc.
type cpuMeter struct {
	db             *pgxpool.Pool
	s0, p0         time.Duration
	ok             bool
	server, client time.Duration // per job, after stop
}

func (c *cpuMeter) start() {
	var err error
	c.s0, err = cputime.Server(c.db.Config().ConnConfig.Host)
	c.ok = err == nil
	c.p0 = cputime.Process()
}

func (c *cpuMeter) stop(n int) {
	s, err := cputime.Server(c.db.Config().ConnConfig.Host)
	if err != nil || !c.ok {
		c.ok = false
		return
	}
	c.server = (s - c.s0) / time.Duration(n)
	c.client = (cputime.Process() - c.p0) / time.Duration(n)
}

// perJob is the server's and the client's CPU time per job.
func (c *cpuMeter) perJob() time.Duration { return c.server + c.client }
