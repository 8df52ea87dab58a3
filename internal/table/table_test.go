package table

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type elem struct {
	key  string
	hash uint64
}

func newTable() *Table[elem] { return New(func(e *elem) string { return e.key }) }

// TestTableAgainstMap runs random finds, inserts and deletes from a small
// key space (so the table fills, grows, clusters and shifts) and checks it
// against a map after every step.
func TestTableAgainstMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	tb := newTable()
	want := map[string]*elem{}
	for step := range 50000 {
		key := fmt.Sprint("k", rng.IntN(3000))
		h := tb.Hash(key)
		got, pos := tb.Find(key, h)
		require.Same(t, want[key], got, "step %d key %s", step, key)
		switch {
		case got == nil:
			e := &elem{key: key, hash: h}
			tb.Insert(e, h, pos)
			want[key] = e
		case rng.IntN(2) == 0:
			require.True(t, tb.Delete(got, got.hash))
			require.False(t, tb.Delete(got, got.hash), "deleted twice")
			delete(want, key)
		}
		require.Equal(t, len(want), tb.Len())
		if step%1000 == 0 {
			require.True(t, tb.Valid(), "step %d", step)
			n := 0
			for e := range tb.All() {
				require.Same(t, want[e.key], e)
				n++
			}
			require.Equal(t, len(want), n)
		}
	}
	for key, e := range want {
		require.Same(t, e, tb.Get(key))
		require.True(t, tb.Delete(e, e.hash))
	}
	require.Zero(t, tb.Len())
	require.Nil(t, tb.Get("k1"))
	require.True(t, tb.Valid())
}

func TestTableValidCatchesCorruption(t *testing.T) {
	tb := newTable()
	e := &elem{key: "a"}
	h := tb.Hash("a")
	_, pos := tb.Find("a", h)
	tb.Insert(e, h, pos)
	require.True(t, tb.Valid())
	e.key = "b" // changed behind the table's back
	require.False(t, tb.Valid())
	e.key = "a"
	tb.n = 2
	require.False(t, tb.Valid())
}

func TestTableAllStopsEarly(t *testing.T) {
	tb := newTable()
	for i := range 10 {
		k := fmt.Sprint(i)
		h := tb.Hash(k)
		_, pos := tb.Find(k, h)
		tb.Insert(&elem{key: k}, h, pos)
	}
	n := 0
	for range tb.All() {
		n++
		if n == 3 {
			break
		}
	}
	require.Equal(t, 3, n)
}

// TestTableShrinksAfterBurst: after a burst of inserts is deleted, the
// table's memory follows its few elements; at a steady size it does not
// resize back and forth.
func TestTableShrinksAfterBurst(t *testing.T) {
	tb := newTable()
	var es []*elem
	for i := range 100_000 {
		key := fmt.Sprint("k", i)
		h := tb.Hash(key)
		_, pos := tb.Find(key, h)
		e := &elem{key: key, hash: h}
		tb.Insert(e, h, pos)
		es = append(es, e)
	}
	peak := tb.Cap()
	require.GreaterOrEqual(t, peak, 100_000)
	for _, e := range es[10:] {
		require.True(t, tb.Delete(e, e.hash))
	}
	require.Equal(t, shrinkFloor, tb.Cap(), "10 elements left in %d slots", tb.Cap())
	require.True(t, tb.Valid())
	for _, e := range es[:10] {
		require.Same(t, e, tb.Get(e.key))
	}

	// A steady size at a boundary: one insert and one delete per step.
	size := tb.Cap()
	for i := range 1000 {
		e := es[10+i]
		_, pos := tb.Find(e.key, e.hash)
		tb.Insert(e, e.hash, pos)
		require.True(t, tb.Delete(e, e.hash))
		require.Equal(t, size, tb.Cap(), "step %d resized", i)
	}
}

// insertKey inserts a new element with key and returns it.
func insertKey(t *testing.T, tb *Table[elem], key string) *elem {
	h := tb.Hash(key)
	got, pos := tb.Find(key, h)
	require.Nil(t, got, key)
	e := &elem{key: key, hash: h}
	tb.Insert(e, h, pos)
	return e
}

// TestTableSegmentsAgainstMap grows the table to many segments, churns it
// and drains it, in random order, checking it against a map: splits,
// directory doublings, merges and halvings keep every element findable.
func TestTableSegmentsAgainstMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	tb := newTable()
	want := map[string]*elem{}
	var keys []string // of want, for picking one at random
	next := 0
	check := func(phase string) {
		require.Equal(t, len(want), tb.Len(), phase)
		require.True(t, tb.Valid(), phase)
		n := 0
		for e := range tb.All() {
			require.Same(t, want[e.key], e, phase)
			n++
		}
		require.Equal(t, len(want), n, phase)
	}
	del := func() {
		k := rng.IntN(len(keys))
		key := keys[k]
		e := want[key]
		require.Same(t, e, tb.Get(key))
		require.True(t, tb.Delete(e, e.hash))
		require.Nil(t, tb.Get(key))
		delete(want, key)
		keys[k] = keys[len(keys)-1]
		keys = keys[:len(keys)-1]
	}
	// The share of inserts in each phase: grow, churn at a steady size,
	// drain to nothing.
	for _, phase := range []struct {
		name  string
		steps int
		ins   int // percent
	}{{"grow", 120_000, 90}, {"churn", 60_000, 50}, {"drain", 200_000, 0}} {
		for step := range phase.steps {
			if rng.IntN(100) < phase.ins || len(keys) == 0 && phase.ins > 0 {
				key := fmt.Sprint("k", next)
				next++
				want[key] = insertKey(t, tb, key)
				keys = append(keys, key)
			} else if len(keys) > 0 {
				del()
			}
			if step%20_000 == 0 {
				check(phase.name)
			}
		}
		check(phase.name)
		if phase.name == "grow" {
			require.Greater(t, tb.depth, uint(3), "the table split into many segments")
		}
	}
	require.Zero(t, tb.Len())
	require.Zero(t, tb.depth, "every segment merged back into one")
	require.Equal(t, shrinkFloor, tb.Cap())
}

// TestTableNoOperationMovesMoreThanASegment: growing to 300,000 elements
// and draining again, no Insert or Delete moves more than one segment's
// worth of elements (at most 4096, however large the table; a table
// resized in one step moves all of them at once), and the directory stays
// small.
func TestTableNoOperationMovesMoreThanASegment(t *testing.T) {
	const n, bound = 300_000, 4096
	tb := newTable()
	es := make([]*elem, n)
	most := 0
	for i := range es {
		before := tb.moved
		es[i] = insertKey(t, tb, fmt.Sprint("k", i))
		most = max(most, tb.moved-before)
	}
	require.Greater(t, most, bound/4, "segments split")
	require.LessOrEqual(t, most, bound, "an Insert moved %d elements", most)
	require.LessOrEqual(t, len(tb.dir)*segSlots, 8*n, "directory of %d entries for %d elements", len(tb.dir), n)
	most = 0
	for _, e := range es {
		before := tb.moved
		require.True(t, tb.Delete(e, e.hash))
		most = max(most, tb.moved-before)
	}
	require.Greater(t, most, 0, "segments merged")
	require.LessOrEqual(t, most, bound, "a Delete moved %d elements", most)
	require.True(t, tb.Valid())
	require.Equal(t, shrinkFloor, tb.Cap())
}

// TestTableValidCatchesBadDirectory: Valid sees a directory entry that
// points at the wrong segment, and a wrong count of deep segments.
func TestTableValidCatchesBadDirectory(t *testing.T) {
	tb := newTable()
	for i := range 20_000 {
		insertKey(t, tb, fmt.Sprint("k", i))
	}
	require.True(t, tb.Valid())
	require.Greater(t, len(tb.dir), 2)
	tb.dir[0], tb.dir[len(tb.dir)-1] = tb.dir[len(tb.dir)-1], tb.dir[0]
	require.False(t, tb.Valid())
	tb.dir[0], tb.dir[len(tb.dir)-1] = tb.dir[len(tb.dir)-1], tb.dir[0]
	require.True(t, tb.Valid())
	tb.deep++
	require.False(t, tb.Valid())
}

// TestTableSplitKeepsEveryElementReachable: a segment splits in place
// (half its elements leave, the rest are re-seated), and every element
// stays reachable, whatever the seed: checked after every split of 100
// tables (100 seeds) growing to 4 levels of segments.
func TestTableSplitKeepsEveryElementReachable(t *testing.T) {
	for run := range 100 {
		tb := newTable()
		for i := range 14_000 {
			before := tb.moved
			insertKey(t, tb, fmt.Sprint("k", i))
			if tb.moved != before {
				require.True(t, tb.Valid(), "table %d, after insert %d", run, i)
			}
		}
	}
}

// BenchmarkTableSplit reports what one split costs: the Inserts of a table
// growing to 2,000,000 elements that split a segment, timed one by one
// (p50-us, p99-us, max-us; the maximum includes whatever the machine and
// the garbage collector did meanwhile).
//
//	go test -run XXX -bench TableSplit -benchtime 3x ./internal/table/
func BenchmarkTableSplit(b *testing.B) {
	const n = 2_000_000
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprint("j", i)
	}
	var splits []time.Duration
	for b.Loop() {
		tb := newTable()
		es := make([]elem, n)
		for i, k := range keys {
			h := tb.Hash(k)
			_, pos := tb.Find(k, h)
			es[i] = elem{key: k, hash: h}
			before := tb.moved
			start := time.Now()
			tb.Insert(&es[i], h, pos)
			if d := time.Since(start); tb.moved-before >= segSlots/2 {
				splits = append(splits, d)
			}
		}
	}
	slices.Sort(splits)
	b.ReportMetric(float64(splits[len(splits)/2].Microseconds()), "p50-us")
	b.ReportMetric(float64(splits[len(splits)*99/100].Microseconds()), "p99-us")
	b.ReportMetric(float64(splits[len(splits)-1].Microseconds()), "max-us")
	b.ReportMetric(float64(len(splits)/b.N), "splits")
}
