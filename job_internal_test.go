package leaserouter

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestWithPayloadKeepsEveryField: a Job built from an admin read's row
// (withPayload) carries every field of the row, so a field added to Job
// cannot be dropped silently from Get, List or Leases.
func TestWithPayloadKeepsEveryField(t *testing.T) {
	var w jobRow
	v := reflect.ValueOf(&w).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		switch f.Interface().(type) {
		case struct{}:
		case string:
			f.SetString(v.Type().Field(i).Name)
		case State:
			f.SetUint(uint64(StateLeased))
		case int, time.Duration:
			f.SetInt(int64(i + 1))
		case Token:
			f.SetUint(uint64(i + 1))
		case time.Time:
			f.Set(reflect.ValueOf(time.Unix(int64(i+1), 0)))
		case []byte:
			f.SetBytes([]byte{byte(i)})
		case []AttemptError:
			f.Set(reflect.ValueOf([]AttemptError{{Attempt: i, At: time.Unix(int64(i), 0), Worker: "w", Error: "e"}}))
		case map[string]string:
			f.Set(reflect.ValueOf(map[string]string{"k": fmt.Sprint(i)}))
		default:
			t.Fatalf("Job.%s: a field of a type this test does not fill", v.Type().Field(i).Name)
		}
	}
	j := withPayload(&w, 7)
	got := reflect.ValueOf(j)
	for i := range v.NumField() {
		name := v.Type().Field(i).Name
		if name == "Payload" {
			require.Equal(t, 7, j.Payload)
			continue
		}
		require.Equal(t, v.Field(i).Interface(), got.FieldByName(name).Interface(), "Job.%s", name)
	}
}
