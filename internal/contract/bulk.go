package contract

import "fmt"

// MaxBulk is the most IDs one bulk call (RetryMany, CancelMany,
// DeleteMany) takes, on every backend: a console's "all matching the
// filter" (10,000 jobs) in one call.
const MaxBulk = 10000

// BulkStates checks the arguments of a bulk call named call: n IDs (at
// most MaxBulk) and states, each below numStates. It returns the states
// as a mask (bit s: state s), every state when states is empty, or an
// error wrapping errInvalid naming the problem.
func BulkStates[S ~uint8](errInvalid error, call string, n int, states []S, numStates S) (mask uint8, err error) {
	if n > MaxBulk {
		return 0, fmt.Errorf("%w: %s of %d IDs, at most %d in one call", errInvalid, call, n, MaxBulk)
	}
	for _, s := range states {
		if s >= numStates {
			return 0, fmt.Errorf("%w: %s: %d is not a state", errInvalid, call, uint8(s))
		}
		mask |= 1 << s
	}
	if mask == 0 {
		mask = 1<<numStates - 1
	}
	return mask, nil
}

// BulkIDs returns the IDs of a bulk call that valid accepts, each once,
// in the order of their first occurrence, and how many distinct IDs it
// refused: those name no job.
func BulkIDs(ids []string, valid func(string) error) (distinct []string, invalid int) {
	seen := make(map[string]struct{}, len(ids))
	distinct = make([]string, 0, len(ids))
	for _, id := range ids {
		if _, dup := seen[id]; dup {
			continue
		}
		seen[id] = struct{}{}
		if valid(id) != nil {
			invalid++
			continue
		}
		distinct = append(distinct, id)
	}
	return distinct, invalid
}
