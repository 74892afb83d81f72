package lag

import "github.com/tidalscale/tidal/strategy/lagconfig"

// The configuration is shared with the collector (strategy/lagconfig); the
// strategy names it here as it always has.
type (
	// Config is one target's lag-scaling configuration.
	Config = lagconfig.Config
	// Mode selects the lag algorithm of a target.
	Mode = lagconfig.Mode
	// OffsetResetPolicy is KEDA's offsetResetPolicy.
	OffsetResetPolicy = lagconfig.OffsetResetPolicy
)

// Modes, policies and bounds of the configuration.
const (
	ModeRiffOffset = lagconfig.ModeRiffOffset
	ModeRiffQueue  = lagconfig.ModeRiffQueue
	ModeKEDA       = lagconfig.ModeKEDA
	ResetLatest    = lagconfig.ResetLatest
	ResetEarliest  = lagconfig.ResetEarliest
	NoMaxReplicas  = lagconfig.NoMaxReplicas
	maxPartitionID = lagconfig.MaxPartitionID
)

// smoothingWeight is riff's smoother weight (the same constant in v0.0.5
// and v0.0.6).
const smoothingWeight float32 = 0.05

// ErrInvalidConfig marks a refused configuration.
var ErrInvalidConfig = lagconfig.ErrInvalidConfig

// DefaultConfig is mode's configuration with the original's defaults.
func DefaultConfig(mode Mode) Config { return lagconfig.DefaultConfig(mode) }

// ParseConfig builds a validated Config from string parameters.
func ParseConfig(mode string, params map[string]string) (Config, error) {
	return lagconfig.ParseConfig(mode, params)
}
