package workload

import (
	"time"

	"github.com/tidalscale/tidal/sim/podmodel"
)

// The load model and the arrival profiles live in sim/podmodel, which the
// what-if simulator (tidal-sim) runs too; these names keep this package's
// callers as they were.
type (
	// ModelConfig describes how the simulated service behaves.
	ModelConfig = podmodel.ModelConfig
	// Model is the load model behind the simulated queue-proxies.
	Model = podmodel.Model
	// Report is what users of the simulated service would have felt so far.
	Report = podmodel.Report
	// WaitStats summarises a set of durations.
	WaitStats = podmodel.WaitStats
	// Profile is an arrival rate over time.
	Profile = podmodel.Profile
	// Constant is a fixed rate per second.
	Constant = podmodel.Constant
	// Step is one level of a Steps profile.
	Step = podmodel.Step
	// Steps holds each level from its At until the next step's.
	Steps = podmodel.Steps
)

// NewModel returns a model with no pods, starting at start.
func NewModel(cfg ModelConfig, profile Profile, start time.Time) (*Model, error) {
	return podmodel.NewModel(cfg, profile, start)
}
