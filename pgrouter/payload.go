package pgrouter

import (
	"encoding/json"
	"fmt"

	"github.com/leaserouter/leaserouter"
)

// encode is a payload as the jsonb column holds it.
func encode[T any](id string, payload T) (string, error) {
	b, err := json.Marshal(payload)
	if err != nil {
		return "", fmt.Errorf("%w: payload of job %q does not encode as JSON: %v", leaserouter.ErrInvalidJob, id, err)
	}
	if hasNUL(b) {
		return "", fmt.Errorf("%w: payload of job %q holds a NUL character, which PostgreSQL's jsonb cannot store", leaserouter.ErrInvalidJob, id)
	}
	return string(b), nil
}

// hasNUL reports whether JSON text b holds the escape \u0000 (a NUL in a
// string), skipping escaped backslashes.
func hasNUL(b []byte) bool {
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' {
			continue
		}
		if i+5 < len(b) && string(b[i+1:i+6]) == "u0000" {
			return true
		}
		i++ // the escaped character
	}
	return false
}

// decode reads a payload from its jsonb column. A json.RawMessage takes
// b as it is (b is the row's own copy, never reused): the column holds
// valid JSON, so decoding it would only check and copy it again.
func decode[T any](id string, b []byte) (T, error) {
	var v T
	if raw, ok := any(&v).(*json.RawMessage); ok {
		*raw = b
		return v, nil
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return v, fmt.Errorf("pgrouter: payload of job %q does not decode: %w", id, err)
	}
	return v, nil
}

// isRaw reports whether T is json.RawMessage, whose payloads any kind's
// rows decode into as they are.
func isRaw[T any]() bool {
	var v T
	_, ok := any(&v).(*json.RawMessage)
	return ok
}

// decodeMetadata reads a job's metadata from its jsonb column (an object
// of strings, as Enqueue wrote it).
func decodeMetadata(id string, b []byte) (map[string]string, error) {
	var m map[string]string
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("pgrouter: metadata of job %q does not decode: %w", id, err)
	}
	return m, nil
}
