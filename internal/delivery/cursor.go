package delivery

import (
	"fmt"
	"log/slog"

	"github.com/leaserouter/leaserouter/internal/contract"
)

// Hooks is a backend's side of the delivery of a batch of entries of
// type R (an event, or a report entry: contract.KindReport). Every method
// is called by the delivery goroutine with no lock held; Deliver runs
// user code (OnEvent and the Logger's handler), and so do the reports
// through Logger.
type Hooks[R any] interface {
	// IsReport reports whether r is not an event but a report entry,
	// logged through the Logger (contract.Report) with Report's text.
	IsReport(r *R) bool
	// Report returns a report entry's message and job.
	Report(r *R) (msg, jobID string)
	// Kind returns the kind of entry r (its String names it in reports)
	// and its job.
	Kind(r *R) (kind fmt.Stringer, jobID string)
	// Deliver gives r's event to Options.OnEvent, if it is set and
	// c.OnEventDue, then calls c.LoggerNext, then writes the event to
	// Options.Logger, if it is set: the event built once for both (on
	// the stack: a backend's own hooks, called directly).
	Deliver(r *R, c *Cursor)
	// Logger is Options.Logger, for reports; nil if unset.
	Logger() *slog.Logger
	// Panicked counts a recovered panic (or runtime.Goexit) of a hook in
	// Stats.CallbackPanics: at once, or at the next Progress.
	Panicked()
	// Progress is told that c.Delivered() more entries were delivered:
	// every contract.ProgressEvery entries and once at the end of a batch.
	Progress(c *Cursor)
}

// Cursor is a delivery goroutine's place in its batch. It outlives the
// goroutine: after a hook's runtime.Goexit the next delivery goroutine
// goes on from it (Exited, then Deliver). Its zero value is the start of
// a batch.
type Cursor struct {
	I         int    // the entry being delivered
	counted   int    // entries counted as delivered (Delivered)
	logger    bool   // OnEvent is done with entry I: the Logger is next
	reporting bool   // in a report: a Goexit now is the Logger's, and the cursor is already past it
	report    string // a report left by Exited for the next delivery goroutine
	reportJob string
}

// Delivered returns how many entries were delivered since the last call,
// and counts them.
func (c *Cursor) Delivered() int {
	n := c.I - c.counted
	c.counted = c.I
	return n
}

// Deliver delivers batch from c.I to its end: the report left by a
// delivery goroutine a hook ended (Exited) first, then each entry to
// OnEvent and then the Logger, in order, a report entry through the
// Logger (contract.Report). It tells h.Progress every
// contract.ProgressEvery entries and once at the end. A hook's panic is
// recovered, counted (h.Panicked) and reported, and delivery goes on
// where it stopped: a panic in OnEvent is reported through the Logger
// (contract.Report), which still gets the event; one in the Logger's
// handler is reported to slog.Default(), and the next entry follows. So
// one bad hook can neither stop delivery nor reach the goroutine that
// caused the event. A hook calling runtime.Goexit ends the calling
// goroutine; its deferred function calls Exited, and the next goroutine
// calls Deliver with the same cursor.
func Deliver[R any, H Hooks[R]](c *Cursor, batch []R, h H) {
	if c.report != "" {
		msg := c.report
		c.report = ""
		reportFrom[R](c, h, msg, c.reportJob)
	}
	for c.I < len(batch) {
		deliverFrom(c, batch, h)
	}
	h.Progress(c)
}

// deliverFrom is Deliver's loop until the end of batch or a recovered
// panic: recovery is set up once per call, not per entry, and the loop
// re-entered after a panic.
func deliverFrom[R any, H Hooks[R]](c *Cursor, batch []R, h H) {
	defer func() {
		if p := recover(); p != nil {
			h.Panicked()
			kind, jobID := h.Kind(&batch[c.I])
			if !c.logger {
				c.logger = true // moved on before reporting, which calls the Logger
				reportFrom[R](c, h, contract.HookPanicked(contract.HookOnEvent, kind, p), jobID)
				return
			}
			// Not through the Logger that just panicked.
			contract.ReportTo(slog.Default(), contract.HookPanicked(contract.HookLogger, kind, p), jobID)
			c.I, c.logger = c.I+1, false
		}
	}()
	for ; c.I < len(batch); c.I, c.logger = c.I+1, false {
		if c.I-c.counted >= contract.ProgressEvery {
			h.Progress(c)
		}
		r := &batch[c.I]
		if h.IsReport(r) {
			if !c.logger {
				c.logger = true
				msg, jobID := h.Report(r)
				reportFrom[R](c, h, msg, jobID)
			}
			continue
		}
		h.Deliver(r, c)
	}
}

// OnEventDue reports whether OnEvent is still to get the entry at c:
// false once it returned, panicked or exited (the Logger's turn).
func (c *Cursor) OnEventDue() bool { return !c.logger }

// LoggerNext records that OnEvent is done with the entry at c (returned,
// or not set): a panic or Goexit from here on is the Logger's.
func (c *Cursor) LoggerNext() { c.logger = true }

// reportFrom logs a report (contract.Report) with the cursor already past
// what it reports, so that a Logger calling runtime.Goexit here makes
// Exited skip nothing more; a panic of the Logger counts as one more.
func reportFrom[R any, H Hooks[R]](c *Cursor, h H, msg, jobID string) {
	c.reporting = true
	if contract.Report(h.Logger(), msg, jobID) {
		h.Panicked()
	}
	c.reporting = false
}

// Exited is called by a delivery goroutine's deferred function when a
// hook ended it with runtime.Goexit (t.FailNow in a test's OnEvent, say)
// while it delivered batch at c: it counts that as a panic of the hook
// (h.Panicked) and steps past it as Deliver steps past a panic (the
// Logger still gets the event whose OnEvent exited), leaving the report
// for the next delivery goroutine, which the backend starts and which
// calls Deliver with c. A Goexit of the Logger while reporting skips
// only that report.
func Exited[R any, H Hooks[R]](c *Cursor, batch []R, h H) {
	h.Panicked()
	if c.reporting { // the cursor is already past what was reported
		c.reporting = false
		return
	}
	kind, jobID := h.Kind(&batch[c.I])
	hook := contract.HookOnEvent
	if c.logger {
		hook = contract.HookLogger
		c.I++
	}
	c.logger = !c.logger
	c.report, c.reportJob = contract.HookGoexit(hook, kind), jobID
}
