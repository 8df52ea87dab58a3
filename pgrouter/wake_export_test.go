package pgrouter

// Test signals of the waker (wake.go): they observe, never steer.

// Parked is how many of r's Acquires are blocked until the next wake-up
// (a notification, Close), their own timer aside.
func Parked[T any](r *Router[T]) int { return r.wake.parkedNow() }

// Listening reports whether r's listener LISTENs (and has made its one
// wake-up of a new connection already).
func Listening[T any](r *Router[T]) bool { return r.sh.listening.Load() }
