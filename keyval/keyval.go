// Package keyval reads string settings (a ConfigMap's data, a workload's
// annotations, a KEDA trigger's metadata) into typed fields, declared once
// per key: how its value is spelled, its bounds and unit, and the refusal,
// which names the key and quotes a bounded prefix of the value.
package keyval

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Error is a refused key and value, and why.
type Error struct {
	Key, Value string
	// Reason says what was wanted ("want a finite number").
	Reason string
}

func (e *Error) Error() string { return Name(e.Key) + " " + Quote(e.Value) + ": " + e.Reason }

// Refuse returns the *Error for key and value, saying what was wanted; want
// is a format.
func Refuse(key, value, want string, args ...any) *Error {
	return &Error{Key: key, Value: value, Reason: "want " + fmt.Sprintf(want, args...)}
}

// Unknown returns the *Error for a key that is not one of what.
func Unknown(key, value, what string) *Error {
	return &Error{Key: key, Value: value, Reason: "unknown " + what}
}

// MaxQuoted is how many bytes of a refused value an error quotes: enough to
// recognise it, never a tenant's whole annotation in status, Events or logs.
const MaxQuoted = 64

// Quote quotes at most the first MaxQuoted bytes of v, saying how long v was
// when it is cut.
func Quote(v string) string {
	if len(v) <= MaxQuoted {
		return strconv.Quote(v)
	}
	return strconv.Quote(v[:MaxQuoted]) + fmt.Sprintf("… (%d bytes)", len(v))
}

// maxKeyName is the longest key shown as it is: an annotation key's
// 253-byte prefix, '/' and 63-byte name.
const maxKeyName = 317

// List returns the items of a comma-separated list, trimmed, empty ones
// dropped ("a, b,," is a and b).
func List(v string) []string {
	var out []string
	for item := range strings.SplitSeq(v, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// Name is key as an error shows it: as it is when plain and no longer than an
// annotation key may be, else quoted and cut like a value (an unknown key is
// the tenant's).
func Name(key string) string {
	if key != "" && len(key) <= maxKeyName && !strings.ContainsFunc(key, func(r rune) bool { return r <= ' ' || r >= 0x7f }) {
		return key
	}
	return Quote(key)
}

// Spelling is how a family of keys writes its values.
type Spelling int

const (
	// Knative reads a value as it is, with Go's strconv and
	// time.ParseDuration (knative.dev/pkg configmap/parser and
	// serving's annotation validation): " 5" is not a number, "1" and "t"
	// are true.
	Knative Spelling = iota
	// KEDA trims a value, reads an empty one as absent, booleans with
	// strconv and integers as JSON numbers, so "+5" and "05" are refused
	// (KEDA v2.21.0 pkg/scalers/scalersconfig/typed_config.go).
	KEDA
)

// Parser reads one value; its error says what was wanted.
type Parser[T any] func(sp Spelling, v string) (T, error)

type want string

func (w want) Error() string { return string(w) }

// Check is a bound on a parsed value.
type Check[T any] struct {
	OK   func(T) bool
	Want string
}

// AtLeast and Between are the common bounds.
func AtLeast[T int32 | int64 | float64 | time.Duration](lo T) Check[T] {
	return Check[T]{func(x T) bool { return x >= lo }, fmt.Sprintf("at least %v", lo)}
}

func Between[T int32 | int64 | float64 | time.Duration](lo, hi T) Check[T] {
	return Check[T]{func(x T) bool { return x >= lo && x <= hi }, fmt.Sprintf("a value in [%v, %v]", lo, hi)}
}

func checked[T any](x T, checks []Check[T]) (T, error) {
	for _, c := range checks {
		if !c.OK(x) {
			return x, want(c.Want)
		}
	}
	return x, nil
}

// Float reads a finite number.
func Float(checks ...Check[float64]) Parser[float64] {
	return func(_ Spelling, v string) (float64, error) {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return 0, want("a finite number")
		}
		return checked(f, checks)
	}
}

// Int reads an integer in [lo, hi].
func Int[T int32 | int64](lo, hi T) Parser[T] {
	return func(sp Spelling, v string) (T, error) {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < int64(lo) || n > int64(hi) || sp == KEDA && !jsonInteger(v) {
			return 0, want(fmt.Sprintf("an integer in [%d, %d]", lo, hi))
		}
		return T(n), nil
	}
}

// jsonInteger reports whether v is an integer as JSON writes it: no sign
// but '-', no leading zero.
func jsonInteger(v string) bool {
	v = strings.TrimPrefix(v, "-")
	return v == "0" || v != "" && v[0] != '0' && v[0] != '+'
}

// Bool reads strconv's spellings: 1, t, T, TRUE, true, True and their false.
func Bool() Parser[bool] {
	return func(_ Spelling, v string) (bool, error) {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return false, want("true or false")
		}
		return b, nil
	}
}

// Duration reads a Go duration ("30s"); whole asks for whole seconds.
func Duration(whole bool, checks ...Check[time.Duration]) Parser[time.Duration] {
	return func(_ Spelling, v string) (time.Duration, error) {
		d, err := time.ParseDuration(v)
		if err != nil {
			return 0, want(`a duration such as "30s"`)
		}
		if d, err = checked(d, checks); err != nil {
			return d, err
		}
		if whole && d%time.Second != 0 {
			return d, want("whole seconds")
		}
		return d, nil
	}
}

// Count reads an integer count of unit in [0, MaxInt32] (KEDA's seconds,
// riff's milliseconds).
func Count(unit time.Duration) Parser[time.Duration] {
	in := Int[int64](0, math.MaxInt32)
	return func(sp Spelling, v string) (time.Duration, error) {
		n, err := in(sp, v)
		return time.Duration(n) * unit, err
	}
}

// OneOf reads one of values' keys.
func OneOf[T any](values map[string]T) Parser[T] {
	names := make([]string, 0, len(values))
	for k := range values {
		names = append(names, strconv.Quote(k))
	}
	slices.Sort(names)
	return func(_ Spelling, v string) (T, error) {
		x, ok := values[v]
		if !ok {
			return x, want("one of " + strings.Join(names, ", "))
		}
		return x, nil
	}
}

// Text takes the value as it is.
func Text() Parser[string] { return func(_ Spelling, v string) (string, error) { return v, nil } }

// Key is one key of a settings struct S: its name, its legacy aliases, and
// how its value parses into S.
type Key[S any] struct {
	Name    string
	aliases []string
	set     func(sp Spelling, s *S, v string) error
}

// Set declares key name: p parses its value, set stores it in S.
func Set[S, T any](name string, p Parser[T], set func(s *S, x T)) Key[S] {
	return Key[S]{Name: name, set: func(sp Spelling, s *S, v string) error {
		x, err := p(sp, v)
		if err == nil {
			set(s, x)
		}
		return err
	}}
}

// Alias adds legacy names of the key; the key's own name wins when both
// are set.
func (k Key[S]) Alias(names ...string) Key[S] {
	k.aliases = append(slices.Clip(k.aliases), names...)
	return k
}

// Keys are the keys of a settings struct S, spelled one way.
type Keys[S any] struct {
	spelling Spelling
	keys     []Key[S]
	// byName maps each name and alias to its key's index.
	byName map[string]int
}

// New declares the keys of S.
func New[S any](sp Spelling, keys ...Key[S]) *Keys[S] {
	ks := &Keys[S]{spelling: sp, keys: keys, byName: map[string]int{}}
	for i, k := range keys {
		for _, n := range append([]string{k.Name}, k.aliases...) {
			if _, dup := ks.byName[n]; dup {
				panic("keyval: key " + n + " declared twice")
			}
			ks.byName[n] = i
		}
	}
	return ks
}

// Known reports whether name is a key or an alias of one.
func (ks *Keys[S]) Known(name string) bool {
	_, ok := ks.byName[name]
	return ok
}

// Parse sets s from data's known keys, in key order, so that the first
// refusal is the same every time, and returns the keys it does not know,
// sorted, for the caller to ignore or refuse.
func (ks *Keys[S]) Parse(s *S, data map[string]string) (unknown []string, err error) {
	names := slices.Sorted(maps.Keys(data))
	for _, n := range names {
		i, ok := ks.byName[n]
		if !ok {
			unknown = append(unknown, n)
			continue
		}
		k := &ks.keys[i]
		if _, own := data[k.Name]; own && n != k.Name {
			continue // an alias beside the key itself
		}
		v := data[n]
		if ks.spelling == KEDA {
			if v = strings.TrimSpace(v); v == "" {
				continue
			}
		}
		if err := k.set(ks.spelling, s, v); err != nil {
			return unknown, Refuse(n, data[n], "%s", err.Error())
		}
	}
	return unknown, nil
}

// Lookup returns the name under which data sets key (the key or an alias)
// and its value.
func (ks *Keys[S]) Lookup(data map[string]string, key string) (name, value string, ok bool) {
	if v, ok := data[key]; ok {
		return key, v, true
	}
	if i, known := ks.byName[key]; known {
		for _, a := range ks.keys[i].aliases {
			if v, ok := data[a]; ok {
				return a, v, true
			}
		}
	}
	return "", "", false
}
