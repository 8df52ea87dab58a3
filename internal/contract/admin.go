package contract

import (
	"fmt"
	"slices"
	"strings"
)

// The admin calls, on every backend: List's filter and page size,
// Leases' limit, and Delete's refusal of a leased job, with one set of
// messages.

// DefaultListLimit and MaxListLimit are leaserouter's: the default and the
// largest page of List (ListParams.Limit) and of Leases.
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
)

// ListFilter checks List's states and limit (ListParams.States and
// Limit): each state below numStates, the limit in [0, MaxListLimit]. It
// returns the states as a mask (bit s: state s; every state when states
// is empty) and the page size (DefaultListLimit for 0), or an error
// wrapping errInvalid (the core's ErrInvalidOptions) naming the problem.
func ListFilter[S ~uint8](errInvalid error, states []S, limit int, numStates S) (mask uint8, size int, err error) {
	for _, s := range states {
		if s >= numStates {
			return 0, 0, fmt.Errorf("%w: ListParams.States: %v is not a state", errInvalid, s)
		}
		mask |= 1 << s
	}
	if mask == 0 {
		mask = 1<<numStates - 1
	}
	switch {
	case limit < 0 || limit > MaxListLimit:
		return 0, 0, fmt.Errorf("%w: ListParams.Limit is %d, must be between 0 and %d", errInvalid, limit, MaxListLimit)
	case limit == 0:
		return mask, DefaultListLimit, nil
	}
	return mask, limit, nil
}

// LeasesLimit checks Leases' limit, in [0, MaxListLimit], and returns the
// number of leases to list (DefaultListLimit for 0), or an error wrapping
// errInvalid.
func LeasesLimit(errInvalid error, limit int) (int, error) {
	switch {
	case limit < 0 || limit > MaxListLimit:
		return 0, fmt.Errorf("%w: Leases limit is %d, must be between 0 and %d", errInvalid, limit, MaxListLimit)
	case limit == 0:
		return DefaultListLimit, nil
	}
	return limit, nil
}

// DeleteLeased is Delete's refusal of the job id while it is leased, on
// every backend: an error wrapping errLeased (the core's ErrLeased) that
// names the job, its lease's fencing token and its holder (the worker
// ID), so an operator knows which worker to stop or which lease to
// Cancel.
func DeleteLeased(errLeased error, id string, token uint64, owner string) error {
	return fmt.Errorf("%w: %q (token %d, held by %q)", errLeased, id, token, owner)
}

// ListKinds checks ListParams.Kinds on every backend and returns the
// filter's key, to fold into a List cursor's fingerprint with the ID
// prefix: "" for no kinds (every kind), else the kinds sorted and
// deduplicated, each after a NUL (which no kind holds). A kind breaking
// the rule for names (NameProblem with MaxIDBytes) is an error wrapping
// errInvalid; "" is the kind of a Router's jobs, and allowed.
func ListKinds(errInvalid error, kinds []string) (key string, err error) {
	if len(kinds) == 0 {
		return "", nil
	}
	for _, k := range kinds {
		if p := NameProblem(k, MaxIDBytes, "MaxIDBytes"); p != "" {
			return "", fmt.Errorf("%w: ListParams.Kinds: %s", errInvalid, p)
		}
	}
	s := slices.Compact(slices.Sorted(slices.Values(kinds)))
	return "\x00" + strings.Join(s, "\x00"), nil
}
