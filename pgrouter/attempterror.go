package pgrouter

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/leaserouter/leaserouter"
)

// A job's error history (Job.Errors, leaserouter.AttemptError) is the
// errors column (migration 0019): a JSON array of the records of its
// failed attempts, oldest first, appended by the statement that records
// the failure (lease_end.sql for Fail, settle_expired.sql and
// jobs_settle.sql for an expiry, leaserouter_append_error), which keeps
// the last leaserouter.MaxAttemptErrors.

// attemptErrorJSON is one record as the column holds it.
type attemptErrorJSON struct {
	Attempt int       `json:"attempt"`
	At      time.Time `json:"at"`
	Worker  string    `json:"worker"`
	Error   string    `json:"error"`
}

// decodeErrors reads job id's errors column b (not NULL). Its instants
// are in time.Local, as pgx gives the other timestamps of a job.
func decodeErrors(id string, b []byte) ([]leaserouter.AttemptError, error) {
	var recs []attemptErrorJSON
	if err := json.Unmarshal(b, &recs); err != nil {
		return nil, fmt.Errorf("pgrouter: error history of job %q does not decode: %w", id, err)
	}
	if len(recs) == 0 {
		return nil, nil
	}
	errs := make([]leaserouter.AttemptError, len(recs))
	for i, r := range recs {
		errs[i] = leaserouter.AttemptError{Attempt: r.Attempt, At: r.At.In(time.Local), Worker: r.Worker, Error: r.Error}
	}
	return errs, nil
}
