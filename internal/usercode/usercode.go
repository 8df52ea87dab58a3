// Package usercode calls into code the library's users wrote, where that
// code may panic: the Error method of an error they pass in (a typed nil
// pointer whose method dereferences it is the common case), an Unwrap or
// As it reaches through. Both backends use it, so a panicking Error()
// reads the same on each. Call it without any lock held: it runs user code.
package usercode

import (
	"errors"
	"fmt"
)

// ErrorText returns err.Error(), or, if that panics, a message that says
// so (naming err's dynamic type and the panic) and panicked true. A nil
// err gives "".
func ErrorText(err error) (text string, panicked bool) {
	if err == nil {
		return "", false
	}
	defer func() {
		if p := recover(); p != nil {
			// %T reads the type, never a method; fmt recovers a panicking
			// Error or String of the panic value itself.
			text, panicked = fmt.Sprintf("leaserouter: Error() of %T panicked: %v", err, p), true
		}
	}()
	return err.Error(), false
}

// As is errors.As(err, target), false if an Unwrap or As method it
// reaches panics.
func As(err error, target any) (ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	return errors.As(err, target)
}

// Safe is an error whose Error() panicked, carried in its place: its
// message says so, and Unwrap still gives the original, so errors.Is and
// errors.As see it (through user code that may panic again: call them
// recovered).
type Safe struct {
	Err  error  // the error whose Error() panicked
	Text string // what ErrorText returned for it
}

// Error returns Text.
func (e *Safe) Error() string { return e.Text }

// Unwrap returns Err.
func (e *Safe) Unwrap() error { return e.Err }

// Error returns err's text and err with an Error() that cannot panic:
// err itself when its Error() returns, a *Safe wrapping it when it panics.
func Error(err error) (text string, safe error) {
	text, panicked := ErrorText(err)
	if panicked {
		return text, &Safe{Err: err, Text: text}
	}
	return text, err
}
