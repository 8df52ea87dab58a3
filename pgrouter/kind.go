package pgrouter

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/leaserouter/leaserouter"
	"github.com/leaserouter/leaserouter/internal/contract"
)

// Kind is one kind of job of a Client: a name, a payload type T and a
// handler, made by Register. Its methods are safe for concurrent use.
type Kind[T any] struct {
	c     *Client
	name  string
	queue string // WithKindQueue's, or DefaultQueue
	h     Handler[T]
}

// Register registers a kind of job with c: its name, its handler h, and
// with leaserouter.WithKindQueue the queue its jobs go to (default
// DefaultQueue). Each job of the kind runs h, inside the Client's
// middleware, with a *Lease[T] whose Payload is the T given to Enqueue
// (decoded from the table's JSON; a payload that does not decode into T
// fails the attempt, retried after Backoff, as for a Router); the lease's
// methods act on the job in its queue, as a Router's do. Register must be
// called before Start. It returns an error wrapping
// leaserouter.ErrInvalidOptions, and registers nothing, when c has
// started, when name is empty, breaks the rule for IDs (see
// leaserouter.MaxIDBytes) or is registered already, when h is nil, when
// WithKindQueue names a queue c does not have, or beyond MaxClientKinds
// kinds; leaserouter.ErrClosed after Stop. A c not made by NewClient (nil,
// or a zero Client) is an error wrapping ErrInvalidOptions.
func Register[T any](c *Client, name string, h Handler[T], opts ...leaserouter.KindOption) (*Kind[T], error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	if err := contract.CheckKindName(leaserouter.ErrInvalidOptions, "kind", name); err != nil {
		return nil, err
	}
	if h == nil {
		return nil, fmt.Errorf("%w: kind %s has a nil handler", leaserouter.ErrInvalidOptions, contract.Quote(name))
	}
	queue := contract.ReadKindOptions(opts)
	if c.queues[queue] == nil {
		return nil, fmt.Errorf("%w: kind %s: WithKindQueue(%s): the Client has no such queue",
			leaserouter.ErrInvalidOptions, contract.Quote(name), contract.Quote(queue))
	}
	var k *Kind[T]
	err := c.life.Register(name, func() error { // under the lifecycle's lock, after its checks
		if len(c.kinds) >= MaxClientKinds {
			return fmt.Errorf("%w: more than MaxClientKinds (%d) kinds", leaserouter.ErrInvalidOptions, MaxClientKinds)
		}
		k = &Kind[T]{c: c, name: name, queue: queue, h: h}
		c.kinds = append(c.kinds, k)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return k, nil
}

// MaxClientKinds is the most kinds one Client registers: each queue's
// claim walks the ready jobs of each kind (one index scan per kind, in
// one statement planned once per connection).
const MaxClientKinds = maxClaimKinds

// Name returns the kind's name.
func (k *Kind[T]) Name() string { return k.name }

// Queue returns the queue the kind's jobs go to unless WithQueue says
// otherwise.
func (k *Kind[T]) Queue() string { return k.queue }

// Enqueue adds a job of this kind with a unique id and its payload (as
// JSON) to the kind's queue, or to the queue leaserouter.WithQueue names;
// before Start too (the job waits for a process that registered the
// kind), as Router.Enqueue does: it wakes the queue's workers in every
// process, and returns leaserouter.ErrDuplicate if the queue knows id
// (whatever the kind of the job it knows: an ID is unique within its
// queue; another queue may have it), an error wrapping ErrInvalidJob for
// a bad id or option, a payload that does not encode, or a WithQueue
// naming a queue the Client does not have, ErrClosed after Stop, or an
// error wrapping the driver's. It commits on its own; see EnqueueTx. A
// nil ctx means context.Background().
func (k *Kind[T]) Enqueue(ctx context.Context, id string, payload T, opts ...leaserouter.EnqueueOption) error {
	return k.enqueue(orBackground(ctx), nil, id, payload, opts)
}

// EnqueueTx is Enqueue as part of the caller's transaction tx: the job
// exists, and wakes other processes, only if tx commits. A known id
// returns ErrDuplicate and leaves tx usable; an invalid id or option is
// refused before any statement (tx stays usable). A nil tx is an error
// wrapping leaserouter.ErrInvalidOptions. The queue's Stats and OnEvent
// count the job as enqueued when the statement succeeds, whether or not
// tx then commits.
func (k *Kind[T]) EnqueueTx(ctx context.Context, tx pgx.Tx, id string, payload T, opts ...leaserouter.EnqueueOption) error {
	if tx == nil {
		return fmt.Errorf("%w: EnqueueTx: nil tx", leaserouter.ErrInvalidOptions)
	}
	return k.enqueue(orBackground(ctx), tx, id, payload, opts)
}

// enqueue is Enqueue (tx nil) and EnqueueTx.
func (k *Kind[T]) enqueue(ctx context.Context, tx pgx.Tx, id string, payload T, opts []leaserouter.EnqueueOption) error {
	q, err := k.target(opts, id)
	if err != nil {
		return err
	}
	raw, err := encode(id, payload)
	if err != nil {
		return err
	}
	return q.r.enqueueKind(ctx, querierOr(q.r, tx), k.name, id, json.RawMessage(raw), opts)
}

// EnqueueMany enqueues jobs of this kind, in slice order, into one queue,
// committed in one transaction, as Router.EnqueueMany does: known
// IDs (and IDs repeating an earlier one of the batch) are skipped as
// duplicates, and their indexes returned; all or nothing for the rest.
// Every job must go to the same queue (the kind's, or the one its
// WithQueue names): a job whose queue differs from the first job's, or a
// queue the Client does not have, is an error wrapping ErrInvalidJob
// naming its batch index, and nothing is enqueued. An empty batch returns
// nil, nil. specs is not retained. A nil ctx means context.Background().
func (k *Kind[T]) EnqueueMany(ctx context.Context, specs []leaserouter.JobSpec[T]) (duplicates []int, err error) {
	return k.enqueueMany(orBackground(ctx), nil, specs)
}

// EnqueueManyTx is EnqueueMany as part of the caller's transaction tx:
// the jobs exist only if tx commits; duplicates leave tx usable. A nil tx
// is an error wrapping leaserouter.ErrInvalidOptions. The queue's Stats
// and OnEvent count the jobs as enqueued when the statement succeeds,
// whether or not tx then commits.
func (k *Kind[T]) EnqueueManyTx(ctx context.Context, tx pgx.Tx, specs []leaserouter.JobSpec[T]) (duplicates []int, err error) {
	if tx == nil {
		return nil, fmt.Errorf("%w: EnqueueManyTx: nil tx", leaserouter.ErrInvalidOptions)
	}
	return k.enqueueMany(orBackground(ctx), tx, specs)
}

// enqueueMany is EnqueueMany (tx nil) and EnqueueManyTx.
func (k *Kind[T]) enqueueMany(ctx context.Context, tx pgx.Tx, specs []leaserouter.JobSpec[T]) ([]int, error) {
	if len(specs) == 0 {
		return nil, nil
	}
	q, err := k.target(specs[0].Options, specs[0].ID)
	if err != nil {
		return nil, contract.AtBatchIndex(err, 0)
	}
	jobs := make([]leaserouter.JobSpec[json.RawMessage], len(specs))
	for i := range specs {
		s := &specs[i]
		qi, err := k.target(s.Options, s.ID)
		if err != nil {
			return nil, contract.AtBatchIndex(err, i)
		}
		if qi != q {
			return nil, contract.AtBatchIndex(fmt.Errorf("%w: job %s goes to queue %s, the batch to queue %s: a batch goes to one queue",
				leaserouter.ErrInvalidJob, contract.Quote(s.ID), contract.Quote(qi.r.opts.Queue), contract.Quote(q.r.opts.Queue)), i)
		}
		raw, err := encode(s.ID, s.Payload)
		if err != nil {
			return nil, contract.AtBatchIndex(err, i)
		}
		jobs[i] = leaserouter.JobSpec[json.RawMessage]{ID: s.ID, Payload: json.RawMessage(raw), Options: s.Options}
	}
	return q.r.enqueueManyKind(ctx, querierOr(q.r, tx), k.name, jobs)
}

// target is the Client's queue a job id with opts goes to: the last
// WithQueue's, or the kind's. A queue the Client does not have is an
// error wrapping ErrInvalidJob.
func (k *Kind[T]) target(opts []leaserouter.EnqueueOption, id string) (*clientQueue, error) {
	if k == nil || k.c == nil {
		return nil, fmt.Errorf("%w: a Kind not made by Register", leaserouter.ErrInvalidOptions)
	}
	var s contract.EnqueueSettings
	if err := contract.ReadEnqueueOptions(leaserouter.ErrInvalidJob, &s, id, opts); err != nil {
		return nil, err
	}
	name := cmp.Or(s.Queue, k.queue)
	q := k.c.queues[name]
	if q == nil {
		return nil, fmt.Errorf("%w: WithQueue(%s) for job %q: the Client has no such queue",
			leaserouter.ErrInvalidJob, contract.Quote(name), id)
	}
	return q, nil
}

// querierOr is tx, or r's pool when tx is nil.
func querierOr[T any](r *Router[T], tx pgx.Tx) querier {
	if tx == nil {
		return r.db
	}
	return tx
}

// kindRunner is a Kind as its Client's dispatch sees it.
type kindRunner interface {
	serve(ctx context.Context, chain func(context.Context, leaserouter.Attempt, func(context.Context) error) error, l *Lease[json.RawMessage]) error
}

// serve runs k's handler on l, the lease its queue's Run granted, inside
// chain (nil: none): the payload is decoded into T inside the chain, so a
// middleware sees a payload that does not decode as the attempt's error;
// the handler gets a view of l typed for T (its methods act on l).
func (k *Kind[T]) serve(ctx context.Context, chain func(context.Context, leaserouter.Attempt, func(context.Context) error) error, l *Lease[json.RawMessage]) error {
	inner := func(ctx context.Context) error {
		p, err := decode[T](l.JobID, l.Payload)
		if err != nil {
			return err
		}
		v := &Lease[T]{JobID: l.JobID, Payload: p, Attempt: l.Attempt, Token: l.Token, WorkerID: l.WorkerID,
			Progress: l.Progress, kind: l.kind, meta: l.meta, via: l}
		return k.h(ctx, v)
	}
	if chain == nil {
		return inner(ctx)
	}
	a := leaserouter.Attempt{Kind: k.name, Queue: l.r.opts.Queue, JobID: l.JobID, Attempt: l.Attempt, Token: l.Token, Metadata: l.meta}
	return chain(ctx, a, inner)
}
