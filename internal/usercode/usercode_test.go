package usercode

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

type nilErr struct{ msg string }

func (e *nilErr) Error() string { return e.msg }

type badUnwrap struct{}

func (badUnwrap) Error() string { return "bad unwrap" }
func (badUnwrap) Unwrap() error { panic("unwrap") }

// TestErrorText: a nil error reads "", a working one its message, and a
// typed nil whose Error panics a message naming its type and the panic.
func TestErrorText(t *testing.T) {
	text, panicked := ErrorText(nil)
	require.Empty(t, text)
	require.False(t, panicked)
	text, panicked = ErrorText(errors.New("boom"))
	require.Equal(t, "boom", text)
	require.False(t, panicked)
	var typed *nilErr
	text, panicked = ErrorText(typed)
	require.True(t, panicked)
	require.Contains(t, text, "Error() of *usercode.nilErr panicked")

	text, safe := Error(typed)
	require.Equal(t, text, safe.Error())
	var got *nilErr
	require.ErrorAs(t, safe, &got, "Safe unwraps to the original")
	plain := errors.New("plain")
	_, same := Error(plain)
	require.Same(t, plain, same)
}

// TestAsRecoversPanickingUnwrap: errors.As through a panicking Unwrap
// reports false instead of panicking.
func TestAsRecoversPanickingUnwrap(t *testing.T) {
	var target *nilErr
	require.NotPanics(t, func() { require.False(t, As(badUnwrap{}, &target)) })
	require.True(t, As(&nilErr{msg: "x"}, &target))
}
