package leaserouter

import (
	"fmt"
	"math"
	"sync"
)

// Token is a fencing token: a number the Router issues with every lease,
// strictly increasing over every lease it grants, so that a downstream
// resource can refuse a write from a holder whose lease has since passed to
// someone else (fencing tokens as in Kleppmann, "How to do distributed
// locking", 2016, and the sequencers of Google's Chubby, Burrows 2006).
//
// Tokens fit in a signed 64-bit column (they are at most math.MaxInt64), and
// the first token of a Router is greater than both Options.TokenFloor and the
// wall-clock Unix time in nanoseconds at New, so tokens keep increasing across
// restarts of the process as long as the wall clock does not step back.
type Token uint64

// maxToken is the largest token issued: tokens must fit in an int64 column.
const maxToken Token = math.MaxInt64

// Fence guards downstream resources against stale lease holders: before a
// holder writes to the resource named key, it presents its lease's Token, and
// the Fence refuses any token lower than the highest it has admitted for that
// key. It is the in-process form of the compare-and-set a database would do
// on a fencing-token column ("UPDATE ... WHERE fencing_token <= $token").
//
// The zero value is ready to use. A Fence is safe for concurrent use; keys
// are independent of one another. Per-key state (a token and a mutex) lives
// until Forget, so a Fence over an unbounded key space needs Forget to stay
// small. A Fence must not be copied after first use.
type Fence struct {
	mu   sync.Mutex
	keys map[string]*fenceKey
}

type fenceKey struct {
	mu      sync.Mutex // held across a Do's write, so writes on one key are serial
	highest Token
}

var errNilFence = fmt.Errorf("leaserouter: nil *Fence: %w", ErrInvalidOptions)

func (f *Fence) key(key string) *fenceKey {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := f.keys[key]
	if k == nil {
		if f.keys == nil {
			f.keys = make(map[string]*fenceKey)
		}
		k = &fenceKey{}
		f.keys[key] = k
	}
	return k
}

// admit records t for k if it is not stale. The caller holds k.mu.
func (k *fenceKey) admit(key string, t Token) error {
	if t < k.highest {
		return &StaleTokenError{Key: key, Token: t, Highest: k.highest}
	}
	k.highest = t
	return nil
}

// Admit returns nil, and records t as the key's highest token, iff t is not
// lower than the highest token admitted for key so far; otherwise it returns
// a *StaleTokenError and records nothing. A key never seen before (or
// forgotten) has highest token 0, so any token is admitted. Any string,
// including "", is a key. Admit waits for a Do in progress on the same key.
// On a nil *Fence it returns an error wrapping ErrInvalidOptions.
func (f *Fence) Admit(key string, t Token) error {
	if f == nil {
		return errNilFence
	}
	k := f.key(key)
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.admit(key, t)
}

// Do admits t for key as Admit does and, if admitted, calls write while
// holding the key, so no other Admit or Do on that key runs until write
// returns: a stale holder can never write after (or while) a newer one
// does. The token is recorded before write runs, so a failed write still
// fences older tokens. Do returns the *StaleTokenError, or write's error
// unchanged. A nil write returns an error wrapping ErrInvalidOptions and
// records nothing. write must not call Admit or Do on the same key (it would
// deadlock); other keys are fine.
func (f *Fence) Do(key string, t Token, write func() error) error {
	if f == nil {
		return errNilFence
	}
	if write == nil {
		return fmt.Errorf("leaserouter: Fence.Do with a nil write func: %w", ErrInvalidOptions)
	}
	k := f.key(key)
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.admit(key, t); err != nil {
		return err
	}
	return write()
}

// Forget drops key's state, as when the resource it guards is deleted: the
// next Admit or Do on key admits any token. A Do in progress on key finishes
// undisturbed. Forgetting an unknown key does nothing; on a nil *Fence,
// Forget does nothing.
func (f *Fence) Forget(key string) {
	if f == nil {
		return
	}
	f.mu.Lock()
	delete(f.keys, key)
	f.mu.Unlock()
}
