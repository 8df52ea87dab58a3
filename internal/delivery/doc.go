// Package delivery is the stepping of event delivery that every backend
// shares: how a delivery goroutine walks a batch through OnEvent and the
// Logger (Cursor, Deliver), recovers a hook's panic or runtime.Goexit and
// reports it (Exited), counts its progress every
// contract.ProgressEvery entries, and lets producers of new work wait for
// room in the backlog (Room). The texts and bounds are internal/contract's
// (event.go); what is tuned to a backend (how batches reach the delivery
// goroutine, which lock guards the backlog, who starts the next goroutine
// after a Goexit) stays in that backend.
package delivery
