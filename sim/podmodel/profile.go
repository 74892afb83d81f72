package podmodel

import "time"

// Profile is an arrival rate over time.
type Profile interface {
	// Rate returns the arrival rate, in requests (or records) per second,
	// at elapsed time since the start of the run. It is never negative.
	Rate(elapsed time.Duration) float64
}

// Constant is a fixed rate per second.
type Constant float64

// Rate implements Profile.
func (c Constant) Rate(time.Duration) float64 { return float64(c) }

// Step is one level of a Steps profile.
type Step struct {
	// At is when the level starts, since the start of the run.
	At time.Duration
	// Rate is the arrival rate per second from At on.
	Rate float64
}

// Steps holds each level from its At until the next step's; before the first
// step the rate is 0. Steps must be sorted by At.
type Steps []Step

// Rate implements Profile.
func (s Steps) Rate(elapsed time.Duration) float64 {
	rate := 0.0
	for _, st := range s {
		if st.At > elapsed {
			break
		}
		rate = st.Rate
	}
	return rate
}
