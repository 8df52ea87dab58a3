package contract

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestMetadataRule: the limits and the text rule, each named in the error.
func TestMetadataRule(t *testing.T) {
	read := func(opts ...EnqueueOption) (EnqueueSettings, error) {
		var s EnqueueSettings
		return s, ReadEnqueueOptions(errJob, &s, "j", opts)
	}
	big := make(map[string]string, MaxMetadataPairs+1)
	for i := range MaxMetadataPairs + 1 {
		big[strings.Repeat("k", i+1)] = ""
	}
	for _, c := range []struct {
		md   map[string]string
		want string
	}{
		{big, "65 pairs, above MaxMetadataPairs (64)"},
		{map[string]string{"k": strings.Repeat("v", MaxMetadataBytes)}, "4097 bytes of keys and values, above MaxMetadataBytes (4096)"},
		{map[string]string{"": "v"}, "an empty key"},
		{map[string]string{"a\x00": "v"}, `key "a\x00" holds NUL at byte 1`},
		{map[string]string{"a": "\xff"}, `the value of key "a" "\xff" is not valid UTF-8 at byte 0`},
	} {
		_, err := read(WithMetadata(c.md))
		require.ErrorIs(t, err, errJob)
		require.ErrorContains(t, err, c.want)
	}
	at := map[string]string{"k": strings.Repeat("v", MaxMetadataBytes-1)}
	s, err := read(WithMetadata(at))
	require.NoError(t, err, "exactly MaxMetadataBytes is allowed")
	require.Equal(t, at, s.Metadata)
}

// TestMetadataMerge: options merge in order, a later key winning; the
// caller's map is copied at the call; an option's map is never written
// by a merge; empty options add nothing.
func TestMetadataMerge(t *testing.T) {
	mine := map[string]string{"a": "1", "b": "2"}
	o1 := WithMetadata(mine)
	mine["a"] = "changed"
	o2 := WithMetadata(map[string]string{"b": "3", "c": "4"})
	var s EnqueueSettings
	require.NoError(t, ReadEnqueueOptions(errJob, &s, "j", []EnqueueOption{o1, WithMetadata(nil), o2}))
	require.Equal(t, map[string]string{"a": "1", "b": "3", "c": "4"}, s.Metadata)
	require.Equal(t, map[string]string{"a": "1", "b": "2"}, *o1.meta, "the merge wrote the first option's map")

	var none EnqueueSettings
	require.NoError(t, ReadEnqueueOptions(errJob, &none, "j", []EnqueueOption{WithMetadata(nil), WithMetadata(map[string]string{})}))
	require.Nil(t, none.Metadata)

	// The limits apply to the merged map.
	half := func(p string) map[string]string {
		m := map[string]string{}
		for i := range MaxMetadataPairs/2 + 1 {
			m[p+strings.Repeat("x", i)] = ""
		}
		return m
	}
	var s2 EnqueueSettings
	require.ErrorContains(t, ReadEnqueueOptions(errJob, &s2, "j", []EnqueueOption{WithMetadata(half("a")), WithMetadata(half("b"))}),
		"66 pairs")
}

// TestCheckQueue: a Router accepts WithQueue of its own queue only.
func TestCheckQueue(t *testing.T) {
	var s EnqueueSettings
	require.NoError(t, ReadEnqueueOptions(errJob, &s, "j", []EnqueueOption{WithQueue("other"), WithQueue("mine")}))
	require.NoError(t, CheckQueue(errJob, &s, "j", "mine"))
	require.NoError(t, CheckQueue(errJob, &EnqueueSettings{}, "j", "mine"))
	err := CheckQueue(errJob, &EnqueueSettings{Queue: "other"}, "j", "mine")
	require.ErrorIs(t, err, errJob)
	require.EqualError(t, err, `invalid job: WithQueue("other") for job "j": this Router serves queue "mine" only`)
}

// TestListKinds: the key is order- and duplicate-blind; bad names refused.
func TestListKinds(t *testing.T) {
	errOpt := errors.New("invalid options")
	k1, err := ListKinds(errOpt, []string{"b", "a", "b"})
	require.NoError(t, err)
	k2, err := ListKinds(errOpt, []string{"a", "b"})
	require.NoError(t, err)
	require.Equal(t, k1, k2)
	none, err := ListKinds(errOpt, nil)
	require.NoError(t, err)
	require.Empty(t, none)
	empty, err := ListKinds(errOpt, []string{""})
	require.NoError(t, err)
	require.NotEqual(t, none, empty, "Kinds [\"\"] filters; nil does not")
	_, err = ListKinds(errOpt, []string{"a\x00"})
	require.ErrorIs(t, err, errOpt)
}

// TestKindRules: kind and queue names, and the queue a kind goes to.
func TestKindRules(t *testing.T) {
	errOpt := errors.New("invalid options")
	require.NoError(t, CheckKindName(errOpt, "kind", "email"))
	require.EqualError(t, CheckKindName(errOpt, "kind", ""), "invalid options: empty kind name")
	require.ErrorContains(t, CheckKindName(errOpt, "queue", strings.Repeat("q", MaxIDBytes+1)), "queue name")
	require.Equal(t, DefaultQueue, ReadKindOptions[KindOption](nil))
	require.Equal(t, "b", ReadKindOptions([]KindOption{WithKindQueue("a"), {}, WithKindQueue("b")}))
}

// TestChain: outermost first, each next runs the rest, a ctx passed to
// next reaches inner, and a middleware's result is the chain's.
func TestChain(t *testing.T) {
	type key struct{}
	var trail []string
	mw := func(name string) func(context.Context, int, func(context.Context) error) error {
		return func(ctx context.Context, a int, next func(context.Context) error) error {
			trail = append(trail, name+">")
			err := next(context.WithValue(ctx, key{}, name))
			trail = append(trail, "<"+name)
			return err
		}
	}
	type M = func(context.Context, int, func(context.Context) error) error
	run := Chain[M, int]([]M{mw("a"), mw("b")})
	errInner := errors.New("inner")
	err := run(context.Background(), 7, func(ctx context.Context) error {
		trail = append(trail, "inner:"+ctx.Value(key{}).(string))
		return errInner
	})
	require.ErrorIs(t, err, errInner)
	require.Equal(t, []string{"a>", "b>", "inner:b", "<b", "<a"}, trail)

	stop := errors.New("stopped")
	run = Chain[M, int]([]M{func(context.Context, int, func(context.Context) error) error { return stop }})
	require.ErrorIs(t, run(context.Background(), 0, func(context.Context) error { t.Fatal("inner ran"); return nil }), stop)
	require.NoError(t, Chain[M, int](nil)(context.Background(), 0, func(context.Context) error { return nil }))
}
