package pgrouter_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Child processes: this test binary run again, in a role TestMain picks
// by an environment variable (a lease holder of latency_test.go, a
// worker process of BenchmarkProcesses). A child talks by lines on its
// stdout and ends at its stdin's end, so that none outlives a parent
// that died without cleaning up.

// childDSN is a connection string for db's database, for a child: the
// pool's own (pgtest's names the test's database), TLS settings and
// password kept.
func childDSN(db *pgxpool.Pool) string { return db.Config().ConnString() }

// child is a running child process.
type child struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser // its end ends the child (as the parent's exit does)
	rd     *os.File       // the read end of the child's stdout
	out    *bufio.Scanner // its lines
	exited chan struct{}  // closed once the process has exited and been waited for (err then set)
	err    error          // Wait's
}

// startChild starts this test binary again with env added to this
// process's environment, running no test and no benchmark itself (the
// child's role comes from env); ctx's end kills it.
func startChild(ctx context.Context, env ...string) (*child, error) {
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$", "-test.bench=^$")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	// A pipe of our own for stdout, so Wait (at the child's exit) never
	// closes what is still to be read.
	rd, wr, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout = wr
	err = cmd.Start()
	_ = wr.Close()
	if err != nil {
		_ = rd.Close()
		return nil, err
	}
	c := &child{cmd: cmd, stdin: stdin, rd: rd, out: bufio.NewScanner(rd), exited: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		close(c.exited)
	}()
	return c, nil
}

// expect reads the child's next line, which must be want.
func (c *child) expect(want string) error {
	if !c.out.Scan() {
		return fmt.Errorf("child %d: no %q: %v", c.cmd.Process.Pid, want, c.out.Err())
	}
	if got := c.out.Text(); got != want {
		return fmt.Errorf("child %d: %q, want %q", c.cmd.Process.Pid, got, want)
	}
	return nil
}

// wait waits for the child to exit, at most 30s, and returns Wait's
// error.
func (c *child) wait() error {
	select {
	case <-c.exited:
		_ = c.rd.Close()
		return c.err
	case <-time.After(30 * time.Second):
		return fmt.Errorf("child %d: did not exit", c.cmd.Process.Pid)
	}
}

// kill SIGKILLs the child unless it has exited, waits for its exit and
// closes its pipes. It may be called again.
func (c *child) kill() {
	_ = c.cmd.Process.Kill()
	<-c.exited
	_ = c.stdin.Close()
	_ = c.rd.Close()
}
