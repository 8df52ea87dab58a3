package main

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRun runs the program briefly and checks it served, printed the
// scrape, and found every counter equal to Stats (run returns an error
// otherwise). The faults must have moved the counters they exist for.
func TestRun(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"-duration", "700ms", "-rate", "2000"}, &out))
	s := out.String()
	require.Regexp(t, `^serving http://127\.0\.0\.1:\d+/metrics for 700ms\n`, s)
	require.Contains(t, s, "every counter in the scrape equals Stats()")
	for _, name := range []string{
		"leaserouter_lease_expirations_total", "leaserouter_retries_total",
		"leaserouter_stale_rejections_total", "leaserouter_leases_granted_total",
	} {
		m := regexp.MustCompile(`(?m)^` + name + `{queue="default"} (\d+)$`).FindStringSubmatch(s)
		require.NotNil(t, m, "%s in:\n%s", name, s)
		n, err := strconv.Atoi(m[1])
		require.NoError(t, err)
		require.Positive(t, n, name)
	}
}

func TestRunBadFlags(t *testing.T) {
	for _, args := range [][]string{{"-duration", "0"}, {"-port", "-1"}, {"-rate", "0"}, {"-nope"}} {
		require.Error(t, run(context.Background(), args, &bytes.Buffer{}), "%v", args)
	}
}
