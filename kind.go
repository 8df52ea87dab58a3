package leaserouter

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync/atomic"

	"github.com/leaserouter/leaserouter/internal/contract"
)

// KindOption changes how Register registers a kind. It is a small
// comparable value, as EnqueueOption is; its zero value is no option.
type KindOption contract.KindOption

// WithKindQueue routes the kind's jobs to queue, one of the Client's
// configured queues; without it they go to DefaultQueue. A job may still
// go to another queue with WithQueue. Register returns an error wrapping
// ErrInvalidOptions when queue is not configured. An empty queue is no
// option.
func WithKindQueue(queue string) KindOption { return KindOption(contract.WithKindQueue(queue)) }

// Kind is one kind of job of a Client: a name, a payload type T and a
// handler, made by Register. Its methods are safe for concurrent use.
type Kind[T any] struct {
	c     *Client
	name  string
	queue string // WithKindQueue's, or DefaultQueue
	index uint16 // its index in the Client's kinds (job.kind)
	h     Handler[T]
}

// MaxKinds is the most kinds one Client registers.
const MaxKinds = math.MaxUint16

// Register registers a kind of job with c: its name, its handler h, and
// with WithKindQueue the queue its jobs go to (default DefaultQueue). Each
// job of the kind runs h, inside the Client's middleware, with a
// *Lease[T] whose Payload is the T given to Enqueue; the lease's methods
// act on the job in its queue, as a Router's do. Register must be called
// before Start. It returns an error wrapping ErrInvalidOptions, and
// registers nothing, when c has started, when name is empty, breaks the
// rule for IDs (see MaxIDBytes) or is registered already, when h is nil,
// when WithKindQueue names a queue c does not have, or beyond MaxKinds;
// ErrClosed after Stop. A c not made by NewClient (nil, or a zero Client)
// is an error wrapping ErrInvalidOptions.
func Register[T any](c *Client, name string, h Handler[T], opts ...KindOption) (*Kind[T], error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	if err := contract.CheckKindName(ErrInvalidOptions, "kind", name); err != nil {
		return nil, err
	}
	if h == nil {
		return nil, fmt.Errorf("%w: kind %s has a nil handler", ErrInvalidOptions, contract.Quote(name))
	}
	queue := contract.ReadKindOptions(opts)
	if c.queues[queue] == nil {
		return nil, fmt.Errorf("%w: kind %s: WithKindQueue(%s): the Client has no such queue",
			ErrInvalidOptions, contract.Quote(name), contract.Quote(queue))
	}
	var k *Kind[T]
	err := c.life.Register(name, func() error { // under the lifecycle's lock, after its checks
		if len(c.kindName) > MaxKinds {
			return fmt.Errorf("%w: more than MaxKinds (%d) kinds", ErrInvalidOptions, MaxKinds)
		}
		k = &Kind[T]{c: c, name: name, queue: queue, index: uint16(len(c.kindName)), h: h}
		// A new table, not an append into the old one: the queues'
		// delivery goroutines read the old one without the lock.
		names := append(slices.Clip(c.kindName), name)
		c.kindName = names
		c.kinds = append(c.kinds, k)
		for _, q := range c.queues {
			q.r.kinds.Store(&names)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return k, nil
}

// Name returns the kind's name ("" for a nil Kind).
func (k *Kind[T]) Name() string {
	if k == nil {
		return ""
	}
	return k.name
}

// Queue returns the queue the kind's jobs go to unless WithQueue says
// otherwise ("" for a nil Kind).
func (k *Kind[T]) Queue() string {
	if k == nil {
		return ""
	}
	return k.queue
}

// Enqueue adds a job of this kind with a unique id and its payload to the
// kind's queue, or to the queue WithQueue names; before Start too (the
// job waits for Start). It returns as Router.Enqueue does: nil once the
// job is stored; an error wrapping ErrDuplicate if the queue still knows
// id (whatever the kind of the job it knows: an ID is unique within its
// queue; another queue may have it), ErrFull beyond the queue's Capacity,
// ErrInvalidJob for a bad id or option, or a WithQueue naming a queue the
// Client does not have, and ErrClosed after Stop; nothing changes then.
// It blocks only on the queue's lock and, with OnEvent or a Logger set,
// while the queue's event backlog is full, returning ctx.Err() if ctx is
// done meanwhile (a done ctx does not stop an Enqueue that need not
// wait). A nil ctx means context.Background(). A nil Kind (or one not
// made by Register) returns an error wrapping ErrInvalidOptions.
func (k *Kind[T]) Enqueue(ctx context.Context, id string, payload T, opts ...EnqueueOption) error {
	if err := k.check(); err != nil {
		return err
	}
	q, err := k.target(contract.QueueOf(opts, k.queue), id)
	if err != nil {
		return err
	}
	// The job's payload is a cell holding the T and the view its first
	// attempt's handler gets: allocated here, with the payload, rather
	// than per attempt (serve).
	return doneErr(ctx, q.r.enqueue(id, any(&kindCell[T]{payload: payload}), k.index, opts, done(ctx)))
}

// EnqueueMany enqueues jobs of this kind, in slice order, into one queue,
// as Router.EnqueueMany does: known IDs (and IDs repeating an earlier one
// of the batch) are skipped as duplicates, and their indexes returned;
// all or nothing for the rest. Every job must go to the same queue (the
// kind's, or the one its WithQueue names): a job whose queue differs from
// the first job's, or a queue the Client does not have, is an error
// wrapping ErrInvalidJob naming its batch index, and nothing is
// enqueued. It blocks as Enqueue does. An empty batch returns nil, nil.
// specs is not retained.
func (k *Kind[T]) EnqueueMany(ctx context.Context, specs []JobSpec[T]) (duplicates []int, err error) {
	if err := k.check(); err != nil {
		return nil, err
	}
	if len(specs) == 0 {
		return nil, nil
	}
	queue := contract.QueueOf(specs[0].Options, k.queue)
	q, err := k.target(queue, specs[0].ID)
	if err != nil {
		return nil, contract.AtBatchIndex(err, 0)
	}
	jobs := make([]JobSpec[any], len(specs))
	cells := makeBlocks[kindCell[T]](len(specs)) // as Enqueue's, in blocks as the records are (batch.go)
	for i := range specs {
		s := &specs[i]
		if qi := contract.QueueOf(s.Options, k.queue); qi != queue {
			return nil, contract.AtBatchIndex(fmt.Errorf("%w: job %s goes to queue %s, the batch to queue %s: a batch goes to one queue",
				ErrInvalidJob, contract.Quote(s.ID), contract.Quote(qi), contract.Quote(queue)), i)
		}
		cell := cells.at(i)
		cell.payload = s.Payload
		jobs[i] = JobSpec[any]{ID: s.ID, Payload: cell, Options: s.Options}
	}
	duplicates, err = q.r.enqueueMany(jobs, k.index, done(ctx))
	return duplicates, doneErr(ctx, err)
}

// check returns an error wrapping ErrInvalidOptions for a Kind that
// Register did not make (nil, or a zero Kind).
func (k *Kind[T]) check() error {
	if k == nil || k.c == nil {
		return fmt.Errorf("%w: a Kind not made by Register", ErrInvalidOptions)
	}
	return nil
}

// target is the Client's queue named queue, for job id.
func (k *Kind[T]) target(queue, id string) (*clientQueue, error) {
	q := k.c.queues[queue]
	if q == nil {
		return nil, contract.UnknownQueue(ErrInvalidJob, queue, id)
	}
	return q, nil
}

// done is ctx's Done channel (nil for a nil ctx: never).
func done(ctx context.Context) <-chan struct{} {
	if ctx == nil {
		return nil
	}
	return ctx.Done()
}

// doneErr is err, with errDone (the wait for room cut short) as ctx's
// error.
func doneErr(ctx context.Context, err error) error {
	if err == errDone {
		return ctx.Err()
	}
	return err
}

// kindRunner is a Kind as its Client's dispatch sees it.
type kindRunner interface {
	serve(ctx context.Context, l *Lease[any]) error
}

// kindCell is the payload of a Client's job in its queue (a Router[any]):
// the T given to Enqueue and the view of a lease typed for T that one
// attempt's handler gets, so that a job's first attempt allocates
// nothing. Which attempt takes the view is decided by taken, not by the
// view's fields: two attempts of a job may be dispatched concurrently
// (the first one's lease lost before its worker called its handler: a
// lease of a batch canceled and retried, an expiry while its worker was
// descheduled), with nothing ordering the two workers. payload is never
// written after Enqueue, so the admin calls and any attempt may read it;
// view is written only by the attempt that took it.
type kindCell[T any] struct {
	payload T
	taken   atomic.Bool
	view    Lease[T]
}

// payloadAny is the job's T as any (boxed, for the admin calls).
func (c *kindCell[T]) payloadAny() any { return c.payload }

// serve runs k's handler on l, the lease its queue's worker granted: with
// a view of l typed for T (see kindCell), inside the middleware when
// there is some. Without middleware it allocates nothing for the attempt
// that takes the job's view (its first, but for a race).
func (k *Kind[T]) serve(ctx context.Context, l *Lease[any]) error {
	cell, _ := l.Payload.(*kindCell[T])
	if cell == nil { // not a job of this Kind: cannot happen (only Enqueue makes them)
		return Permanent(fmt.Errorf("leaserouter: job %s of kind %s has a payload of another type", contract.Quote(l.JobID), contract.Quote(k.name)))
	}
	v := &cell.view
	if !cell.taken.CompareAndSwap(false, true) {
		// Another attempt's handler has the job's view, and may keep it
		// (or be writing it now): this attempt gets its own.
		v = new(Lease[T])
	}
	// Field by field: the view's other fields are zero.
	v.JobID, v.Payload, v.Attempt, v.Token, v.WorkerID = l.JobID, cell.payload, l.Attempt, l.Token, l.WorkerID
	v.Progress, v.lost = l.Progress, viewOf{l}
	chain := k.c.chain
	if chain == nil {
		return k.h(ctx, v)
	}
	a := Attempt{Kind: k.name, Queue: l.r.queue, JobID: l.JobID, Attempt: l.Attempt, Token: l.Token, Metadata: l.Metadata()}
	return chain(ctx, a, func(ctx context.Context) error { return k.h(ctx, v) })
}
