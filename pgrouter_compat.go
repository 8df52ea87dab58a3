package leaserouter

import (
	"time"

	"github.com/leaserouter/leaserouter/internal/contract"
)

// The root's former exports that pgrouter calls until it calls
// internal/contract instead; removed with that move.

// EnqueueSettings is contract.EnqueueSettings.
type EnqueueSettings = contract.EnqueueSettings

// ReadEnqueueOptions is contract.ReadEnqueueOptions.
func ReadEnqueueOptions(id string, opts []EnqueueOption) (EnqueueSettings, error) {
	var s EnqueueSettings
	err := contract.ReadEnqueueOptions(ErrInvalidJob, &s, id, opts)
	return s, err
}

// ValidateWorkerID is contract.ValidateWorkerID.
func ValidateWorkerID(id string) error { return contract.ValidateWorkerID(ErrInvalidOptions, id) }

// CheckPeriodic is contract.CheckPeriodic.
func CheckPeriodic(name string, s Schedule, opts []EnqueueOption) error {
	return contract.CheckPeriodic(ErrInvalidOptions, ErrInvalidJob, name, s, opts, 0)
}

// WithDefaults is contract.WorkerDefaults.
func (o WorkerOptions) WithDefaults(lease time.Duration) (WorkerOptions, error) {
	w, err := contract.WorkerDefaults(ErrInvalidOptions, contract.WorkerOptions(o), lease)
	return WorkerOptions(w), err
}
