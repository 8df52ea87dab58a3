package leaserouter

import "github.com/leaserouter/leaserouter/internal/contract"

// The limits of a job's metadata (WithMetadata), the same on every
// backend: at most MaxMetadataPairs pairs, and at most MaxMetadataBytes
// bytes of keys and values in all.
const (
	MaxMetadataPairs = contract.MaxMetadataPairs
	MaxMetadataBytes = contract.MaxMetadataBytes
)

// WithMetadata stores md with the job: a small map of strings that the
// router never interprets, read back in Job.Metadata, Lease.Metadata and
// a Middleware's Attempt.Metadata, and kept across attempts, Snooze and
// Retry (a W3C traceparent carried from the enqueuing span to the
// attempt's, a tenant, a request ID). md is copied when WithMetadata is
// called, so the caller may reuse its map. Several WithMetadata options
// merge in order, a later key replacing an earlier one; a nil or empty md
// adds nothing, and a job given none has nil Metadata.
//
// Enqueue returns an error wrapping ErrInvalidJob, naming the problem,
// when the merged map has more than MaxMetadataPairs pairs or more than
// MaxMetadataBytes bytes of keys and values, an empty key, or a key or
// value that is not valid UTF-8 or holds NUL (a database's text refuses
// both, and every backend keeps one rule).
func WithMetadata(md map[string]string) EnqueueOption {
	return EnqueueOption(contract.WithMetadata(md))
}
