package pgrouter

// validLease is what export_test.go's PlantSkipTokenCheck still assigns;
// nothing reads it any more. The one invariant is the SQL function
// leaserouter_lease_valid (migration 0003), which every lease statement
// calls and no Go value can swap; the planted-bug proof belongs to the
// conformance suite's deliberately broken fake backend. Delete this file
// with PlantSkipTokenCheck.
var validLease string
