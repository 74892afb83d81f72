package keepalive

import (
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	deciderv1 "github.com/tidalscale/tidal/proto/tidal/decider/v1"
)

// MaxEncoded bounds an encoded State, as the API bounds it wherever it
// travels: a full histogram (240 counts of up to two bytes, a few bytes
// more) in base64 is about 660 characters.
const MaxEncoded = commonv1.MaxKeepAliveState

// maxUnix bounds a stored time: the year 9999, so a stored value never
// overflows a time.Time's arithmetic.
const maxUnix = 253402300799

// ErrBadState is wrapped by every error of Decode.
var ErrBadState = errors.New("bad keep-alive state")

// Encode writes the state compactly (deciderv1.KeepAliveState, then
// unpadded base64url): a few dozen characters for a target with a regular
// pattern, never more than MaxEncoded.
func (s *State) Encode() string {
	m := &deciderv1.KeepAliveState{OutOfRange: uint32(s.hist.oob)}
	if !s.lastActive.IsZero() {
		m.LastActive = s.lastActive.Unix()
	}
	n := Bins
	for n > 0 && s.hist.counts[n-1] == 0 {
		n--
	}
	m.Counts = make([]uint32, n)
	for i := range n {
		m.Counts[i] = uint32(s.hist.counts[i])
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		// A message of integers always marshals.
		panic(fmt.Sprintf("keep-alive state: %v", err))
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// Decode reads a state Encode wrote. Anything else (it is stored where
// others may write) is refused with an error wrapping ErrBadState, naming
// the field; "" decodes to the empty state.
func Decode(text string) (State, error) {
	var s State
	if text == "" {
		return s, nil
	}
	if len(text) > MaxEncoded {
		return s, fmt.Errorf("%w: %d characters, want at most %d", ErrBadState, len(text), MaxEncoded)
	}
	b, err := base64.RawURLEncoding.DecodeString(text)
	if err != nil {
		return s, fmt.Errorf("%w: not unpadded base64url: %w", ErrBadState, err)
	}
	var m deciderv1.KeepAliveState
	if err := proto.Unmarshal(b, &m); err != nil {
		return s, fmt.Errorf("%w: %w", ErrBadState, err)
	}
	if m.LastActive < 0 || m.LastActive > maxUnix {
		return s, fmt.Errorf("%w: last_active %d: want Unix seconds in [0, %d]", ErrBadState, m.LastActive, maxUnix)
	}
	if len(m.Counts) > Bins {
		return s, fmt.Errorf("%w: counts: %d bins, want at most %d", ErrBadState, len(m.Counts), Bins)
	}
	total := uint64(m.OutOfRange)
	for i, c := range m.Counts {
		if c > MaxSamples {
			return s, fmt.Errorf("%w: counts[%d] %d: want at most %d", ErrBadState, i, c, MaxSamples)
		}
		s.hist.counts[i] = uint16(c)
		total += uint64(c)
	}
	if m.OutOfRange > MaxSamples {
		return s, fmt.Errorf("%w: out_of_range %d: want at most %d", ErrBadState, m.OutOfRange, MaxSamples)
	}
	if total > MaxSamples {
		return s, fmt.Errorf("%w: %d idle times, want at most %d", ErrBadState, total, MaxSamples)
	}
	s.hist.oob, s.hist.total = uint16(m.OutOfRange), uint16(total)
	if m.LastActive > 0 {
		s.lastActive = time.Unix(m.LastActive, 0).UTC()
	}
	return s, nil
}
