package pgrouter

// PlantSkipTokenCheck breaks the one invariant for the linearizability
// test's planted bug: lease operations stop checking the token, so a
// superseded lease is accepted while its job is leased to another. It
// returns the function that restores the check.
func PlantSkipTokenCheck() (restore func()) {
	saved := validLease
	validLease = `$3::bigint IS NOT NULL AND state = 2 AND lease_expires_at > clock_timestamp()`
	return func() { validLease = saved }
}
