package table

import (
	"fmt"
	"math/rand/v2"
	"testing"

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
