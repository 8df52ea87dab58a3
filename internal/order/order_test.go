package order

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

type elem struct {
	seq   uint64
	class uint8
	c     *Chunk[elem]
}

func newLog() *Log[elem] { return New(func(e *elem, c *Chunk[elem]) { e.c = c }) }

// walkAll collects every element below before in mask through Walk,
// resuming after each budget runs out.
func walkAll(l *Log[elem], before uint64, mask uint8, budget int) []*elem {
	var got []*elem
	for {
		resume, more := l.Walk(before, mask, budget, func(e *elem) bool {
			if mask&(1<<e.class) != 0 {
				got = append(got, e)
			}
			return true
		})
		if !more {
			return got
		}
		before = resume
	}
}

// TestLogAgainstModel drives a Log with random appends, moves, removals
// and replacements, checking after each step that walks (any mask, any
// budget, from any bound) yield the model's elements newest first, that
// every element knows its chunk, and that the chunks stay few.
func TestLogAgainstModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	l := newLog()
	var model []*elem // live, ascending by seq
	seq := uint64(0)
	for step := range 8000 {
		switch op := rng.IntN(10); {
		case op < 5 || len(model) == 0: // append a run
			for range 1 + rng.IntN(50) {
				seq++
				e := &elem{seq: seq, class: uint8(rng.IntN(6))}
				e.c = l.Append(e, e.seq, e.class)
				model = append(model, e)
			}
		case op < 7: // move one
			e := model[rng.IntN(len(model))]
			to := uint8(rng.IntN(6))
			e.c.Move(e.class, to)
			e.class = to
		case op < 9: // remove a run, mostly the oldest (as retention does)
			for range 1 + rng.IntN(80) {
				if len(model) == 0 {
					break
				}
				i := 0
				if rng.IntN(4) == 0 {
					i = rng.IntN(len(model))
				}
				e := model[i]
				require.True(t, l.Remove(e.c, e.seq, e.class))
				require.False(t, l.Remove(e.c, e.seq, e.class), "removed twice")
				model = slices.Delete(model, i, i+1)
			}
		default: // replace one
			i := rng.IntN(len(model))
			e := &elem{seq: model[i].seq, class: model[i].class}
			require.True(t, l.Replace(model[i].c, e.seq, e))
			model[i] = e
		}
		require.Equal(t, len(model), l.Len())
		if step%97 != 0 {
			continue
		}
		for _, e := range model {
			require.NotNil(t, e.c)
			require.Same(t, e, e.c.items[e.c.slot(e.seq)], "element's chunk")
		}
		require.LessOrEqual(t, len(l.chunks), 2+len(model)/(chunkLen/16), "chunks for %d elements", len(model))
		mask := uint8(rng.IntN(256))
		var before uint64
		if rng.IntN(2) == 0 {
			before = uint64(rng.IntN(int(seq) + 2))
		}
		var want []*elem
		for i := len(model) - 1; i >= 0; i-- {
			if e := model[i]; (before == 0 || e.seq < before) && mask&(1<<e.class) != 0 {
				want = append(want, e)
			}
		}
		got := walkAll(l, before, mask, 1+rng.IntN(700))
		require.Equal(t, len(want), len(got), "step %d mask %b before %d", step, mask, before)
		for i := range want {
			require.Same(t, want[i], got[i])
		}
	}
}

// TestWalkStopsWhereTold: a walk that f stops resumes below the element
// it stopped at; one that runs out of budget resumes at the first slot it
// did not look at.
func TestWalkStopsWhereTold(t *testing.T) {
	l := newLog()
	for s := uint64(1); s <= 10; s++ {
		e := &elem{seq: s}
		e.c = l.Append(e, s, 0)
	}
	n := 0
	resume, more := l.Walk(0, 1, 100, func(e *elem) bool { n++; return n < 3 })
	require.Equal(t, uint64(8), resume)
	require.True(t, more)
	resume, more = l.Walk(resume, 1, 2, func(*elem) bool { return true })
	require.Equal(t, uint64(6), resume, "slots 7 and 6 looked at, resume below 6")
	require.True(t, more)
	_, more = l.Walk(resume, 1, 100, func(*elem) bool { return true })
	require.False(t, more)
}

// TestSparseChunksSkipped: a walk for a class no chunk holds looks at no
// slot, however many elements there are, and a chunk skipped costs one
// slot of the budget, so a walk over many chunks with none of the class
// is still bounded, resuming where it stopped.
func TestSparseChunksSkipped(t *testing.T) {
	l := newLog()
	for s := uint64(1); s <= 100*chunkLen; s++ {
		l.Append(&elem{seq: s}, s, 0)
	}
	looked := 0
	_, more := l.Walk(0, 1<<3, 100, func(*elem) bool { looked++; return true })
	require.False(t, more, "a budget of 100 was enough: every chunk skipped")
	require.Zero(t, looked)
	var before uint64
	walks := 0
	for more = true; more; walks++ {
		before, more = l.Walk(before, 1<<3, 10, func(*elem) bool { looked++; return true })
	}
	require.Zero(t, looked)
	require.Equal(t, 10, walks, "100 chunks, 10 a walk")
	require.Len(t, walkAll(l, 0, 1, 10), 100*chunkLen, "resuming after skipped chunks loses nothing")
}

// TestMemoryFollowsLiveElements: after most elements are removed, the
// chunks left hold about what is live.
func TestMemoryFollowsLiveElements(t *testing.T) {
	l := newLog()
	var all []*elem
	for s := uint64(1); s <= 100*chunkLen; s++ {
		e := &elem{seq: s}
		e.c = l.Append(e, s, 0)
		all = append(all, e)
	}
	for i, e := range all {
		if i%100 != 0 { // keep one in a hundred
			require.True(t, l.Remove(e.c, e.seq, 0))
		}
	}
	slots := 0
	for _, c := range l.chunks {
		slots += cap(c.items)
	}
	require.LessOrEqual(t, slots, 4*l.Len()+16*len(l.chunks), "slots kept for %d elements", l.Len())
}

// TestMemoryFollowsLiveElementsRemovedWhileLast: elements removed while
// their chunk is the last one (the one appended to: jobs that end as
// fast as they come, Retention < 0) leave no chunk of mostly empty slots
// behind once the next chunk starts, even when one element of each
// chunk stays (a job delayed for an hour among quick ones).
func TestMemoryFollowsLiveElementsRemovedWhileLast(t *testing.T) {
	l := newLog()
	seq := uint64(0)
	for range 200 {
		for i := range chunkLen {
			seq++
			e := &elem{seq: seq}
			e.c = l.Append(e, seq, 0)
			if i != 0 { // the first of each run stays
				require.True(t, l.Remove(e.c, e.seq, 0))
			}
		}
	}
	require.Equal(t, 200, l.Len())
	slots := 0
	for _, c := range l.chunks {
		slots += cap(c.items)
	}
	require.LessOrEqual(t, slots, 4*l.Len()+2*chunkLen, "slots kept for %d elements in %d chunks", l.Len(), len(l.chunks))
	require.LessOrEqual(t, len(l.chunks), 2)
	require.Equal(t, 200, len(walkAll(l, 0, 1, 1000)))
}

// TestDrainInOrderReusesChunks: a log whose oldest elements are removed
// as new ones come (jobs ending in about the order they came, a backlog
// of several chunks) allocates no chunk once it is warm: the chunks the
// head drains, packed on the way, become the tail's.
func TestDrainInOrderReusesChunks(t *testing.T) {
	l := newLog()
	var live []*elem
	seq := uint64(0)
	step := func() {
		for range chunkLen {
			seq++
			e := &elem{seq: seq}
			e.c = l.Append(e, seq, 0)
			live = append(live, e)
		}
		for _, e := range live[:chunkLen] {
			require.True(t, l.Remove(e.c, e.seq, 0))
		}
		live = append(live[:0], live[chunkLen:]...)
	}
	for range 4 * chunkLen { // a backlog of four chunks
		seq++
		e := &elem{seq: seq}
		e.c = l.Append(e, seq, 0)
		live = append(live, e)
	}
	step() // warm: the spare filled
	allocs := testing.AllocsPerRun(16, step)
	// step allocates its chunkLen elements (&elem{...} escapes), and the
	// head chunk, draining, is packed twice on the way (at an eighth
	// live, then at a quarter of that): a smaller chunk of three objects
	// each time. Every other chunk is a recycled one.
	const packs = 2 * 3
	require.LessOrEqual(t, allocs, float64(chunkLen+packs), "the log allocated %v objects for a chunk's worth of jobs", allocs-chunkLen)
}
