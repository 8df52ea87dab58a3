package contract

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The core's errors, as the backends pass them in.
var (
	errJob  = errors.New("invalid job")
	errOpts = errors.New("invalid options")
)

// TestReadEnqueueOptions: options read as Enqueue applies them (the later
// of WithDelay and WithRunAt wins), and the same bad input refused.
func TestReadEnqueueOptions(t *testing.T) {
	read := func(id string, opts []EnqueueOption) (EnqueueSettings, error) {
		var s EnqueueSettings
		err := ReadEnqueueOptions(errJob, &s, id, opts)
		s.timed = false
		return s, err
	}
	at := time.Unix(1e9, 0)
	s, err := read("a", nil)
	require.NoError(t, err)
	require.Equal(t, EnqueueSettings{}, s)
	s, err = read("a", []EnqueueOption{
		WithPriority(-3), WithRunAt(at), WithDelay(time.Second), WithMaxAttempts(7),
	})
	require.NoError(t, err)
	require.Equal(t, EnqueueSettings{Priority: -3, MaxAttempts: 7, Delay: time.Second}, s)
	s, err = read("a", []EnqueueOption{WithDelay(time.Second), WithRunAt(at)})
	require.NoError(t, err)
	require.Equal(t, EnqueueSettings{RunAt: at}, s)
	for _, bad := range []struct {
		id   string
		opts []EnqueueOption
	}{
		{"", nil},
		{"a", []EnqueueOption{WithDelay(-1)}},
		{"a", []EnqueueOption{WithMaxAttempts(0)}},
	} {
		_, err := read(bad.id, bad.opts)
		require.ErrorIs(t, err, errJob)
	}
}

// TestPlainIDFindsEveryBadByteAtEveryOffset: PlainID, which reads IDs a
// word at a time, refuses a NUL or a byte of 0x80 and above wherever it
// stands, in IDs of every length up to two words and at MaxIDBytes, and
// passes the same IDs without it.
func TestPlainIDFindsEveryBadByteAtEveryOffset(t *testing.T) {
	lengths := []int{MaxIDBytes - 1, MaxIDBytes}
	for n := 1; n <= 17; n++ {
		lengths = append(lengths, n)
	}
	for _, n := range lengths {
		id := []byte(strings.Repeat("\x7f", n)) // ASCII's edge: 0x7f passes, 0x80 not
		require.True(t, PlainID(string(id)), "length %d", n)
		for at := range n {
			for _, b := range []byte{0, 0x80, 0xff, 0xc3} {
				id[at] = b
				require.False(t, PlainID(string(id)), "length %d, byte %#x at %d", n, b, at)
			}
			id[at] = 0x01 // the other edge: 0x01 passes, 0x00 not
			require.True(t, PlainID(string(id)), "length %d, 0x01 at %d", n, at)
			id[at] = 0x7f
		}
	}
	require.False(t, PlainID(strings.Repeat("a", MaxIDBytes+1)))
	require.True(t, PlainID(""))
}

// TestValidateIDEveryByte: the rule for IDs at each single byte, so the
// fast path for plain ASCII IDs (read a word at a time) is checked at its edges:
// 0x01-0x7f pass, NUL and every byte 0x80-0xff (alone, never valid UTF-8)
// are refused with the problem named; a long ASCII ID and a multi-byte
// rune take the slow path and pass, as does the longest ID.
func TestValidateIDEveryByte(t *testing.T) {
	for b := range 256 {
		id := "id" + string([]byte{byte(b)}) + "x"
		err, werr := ValidateID(errJob, id), ValidateWorkerID(errOpts, id)
		switch {
		case b == 0:
			require.ErrorIs(t, err, errJob)
			require.ErrorContains(t, err, "holds NUL at byte 2")
			require.ErrorIs(t, werr, errOpts)
			require.ErrorContains(t, werr, "holds NUL at byte 2")
		case b >= 0x80:
			require.ErrorIs(t, err, errJob, "byte %#x", b)
			require.ErrorContains(t, err, "not valid UTF-8 at byte 2", "byte %#x", b)
			require.ErrorIs(t, werr, errOpts, "byte %#x", b)
		default:
			require.NoError(t, err, "byte %#x", b)
			require.NoError(t, werr, "byte %#x", b)
		}
	}
	for _, id := range []string{"é", "ключ-42", "🚀", strings.Repeat("a", MaxIDBytes), strings.Repeat("é", MaxIDBytes/2)} {
		require.NoError(t, ValidateID(errJob, id), "%.40q", id)
		require.NoError(t, ValidateWorkerID(errOpts, id), "%.40q", id)
	}
	require.ErrorContains(t, ValidateID(errJob, strings.Repeat("a", MaxIDBytes+1)), "above MaxIDBytes")
	require.ErrorContains(t, ValidateID(errJob, ""), "empty ID")
	require.NoError(t, ValidateWorkerID(errOpts, ""))
}
