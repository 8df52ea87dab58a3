package contract

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var errInvalid = errors.New("invalid")

func TestBulkStates(t *testing.T) {
	mask, err := BulkStates(errInvalid, "RetryMany", MaxBulk, []uint8{1, 4, 1}, 6)
	require.NoError(t, err)
	require.Equal(t, uint8(1<<1|1<<4), mask)
	mask, err = BulkStates(errInvalid, "RetryMany", 0, []uint8(nil), 6)
	require.NoError(t, err)
	require.Equal(t, uint8(1<<6-1), mask, "no states: every state")
	_, err = BulkStates(errInvalid, "CancelMany", MaxBulk+1, []uint8(nil), 6)
	require.ErrorIs(t, err, errInvalid)
	require.ErrorContains(t, err, "CancelMany of 10001 IDs, at most 10000")
	_, err = BulkStates(errInvalid, "DeleteMany", 1, []uint8{6}, 6)
	require.ErrorIs(t, err, errInvalid)
	require.ErrorContains(t, err, "DeleteMany: 6 is not a state")
}

func TestBulkIDs(t *testing.T) {
	valid := func(id string) error {
		if id == "" || strings.Contains(id, "\x00") {
			return errInvalid
		}
		return nil
	}
	ids, invalid := BulkIDs([]string{"b", "a", "b", "", "x\x00", "", "c"}, valid)
	require.Equal(t, []string{"b", "a", "c"}, ids, "each once, in the order first given")
	require.Equal(t, 2, invalid, "distinct invalid IDs")
}
