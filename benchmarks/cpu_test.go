package benchmarks

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
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
	c.s0, err = serverCPU(c.db)
	c.ok = err == nil
	c.p0 = processCPU()
}

func (c *cpuMeter) stop(n int) {
	s, err := serverCPU(c.db)
	if err != nil || !c.ok {
		c.ok = false
		return
	}
	c.server = (s - c.s0) / time.Duration(n)
	c.client = (processCPU() - c.p0) / time.Duration(n)
}

// perJob is the server's and the client's CPU time per job.
func (c *cpuMeter) perJob() time.Duration { return c.server + c.client }

// serverCPU is the CPU time (user and system) of db's server so far: its
// postmaster's (pid from postmaster.pid in the data directory, which
// pgtest's clusters keep beside their socket) with its children's that
// exited and were waited for, and its live children's. Linux only (as
// pgrouter's benchmarks read it).
func serverCPU(db *pgxpool.Pool) (time.Duration, error) {
	pidFile, err := os.ReadFile(filepath.Join(db.Config().ConnConfig.Host, "data", "postmaster.pid"))
	if err != nil {
		return 0, err
	}
	master, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(pidFile), "\n", 2)[0]))
	if err != nil {
		return 0, err
	}
	// /proc/<pid>/stat: fields after the command's ")": state is the
	// 1st, ppid the 2nd, utime/stime the 12th/13th, cutime/cstime the
	// 14th/15th, in clock ticks (100 a second on Linux).
	stat := func(pid int) ([]string, error) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return nil, err
		}
		s := string(b)
		return strings.Fields(s[strings.LastIndexByte(s, ')')+1:]), nil
	}
	ticks := func(f []string, i ...int) (t int64) {
		for _, k := range i {
			v, _ := strconv.ParseInt(f[k], 10, 64)
			t += v
		}
		return t
	}
	f, err := stat(master)
	if err != nil {
		return 0, err
	}
	total := ticks(f, 11, 12, 13, 14)
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range procs {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == master {
			continue
		}
		f, err := stat(pid)
		if err != nil || f[1] != strconv.Itoa(master) {
			continue // gone, or not the server's
		}
		total += ticks(f, 11, 12)
	}
	return time.Duration(total) * 10 * time.Millisecond, nil
}
