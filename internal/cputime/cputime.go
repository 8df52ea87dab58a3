// Package cputime reads CPU time for the benchmarks of every module: the
// process's own (Process) and a local PostgreSQL server's (Server).
package cputime

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Server is the CPU time (user and system) of the PostgreSQL server whose
// socket directory is dir, so far: its postmaster's (pid from
// postmaster.pid in dir/data, where pgtest's clusters keep their data
// beside their socket) with its children's that exited and were waited
// for, and its live children's. It reads /proc: on a system without it,
// or for a server whose data directory is elsewhere, it returns an error.
func Server(dir string) (time.Duration, error) {
	pidFile, err := os.ReadFile(filepath.Join(dir, "data", "postmaster.pid"))
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
