package leaserouter

import "github.com/leaserouter/leaserouter/internal/contract"

// KindOption changes how Register registers a kind. It is a small
// comparable value, as EnqueueOption is; its zero value is no option.
type KindOption contract.KindOption

// WithKindQueue routes the kind's jobs to queue, one of the Client's
// configured queues; without it they go to DefaultQueue. A job may still
// go to another queue with WithQueue. Register returns an error wrapping
// ErrInvalidOptions when queue is not configured. An empty queue is no
// option.
func WithKindQueue(queue string) KindOption { return KindOption(contract.WithKindQueue(queue)) }
