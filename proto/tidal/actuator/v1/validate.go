package actuatorv1

// Validate methods for the requests of ActuatorService, called by the
// services' validation interceptor before any handler runs.

import (
	"fmt"
	"math"
	"strings"

	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
)

// MaxReplicas bounds every replica count the API accepts.
const MaxReplicas = 100000

// Validate implements the validation interceptor's contract.
func (r *ScaleRequest) Validate() error {
	if err := r.GetTarget().ValidateField("target"); err != nil {
		return err
	}
	if d := r.GetDesiredReplicas(); d < 0 || d > MaxReplicas {
		return commonv1.Invalid("desired_replicas", d, fmt.Sprintf("0 to %d", MaxReplicas))
	}
	if r.GetDecisionSequence() == 0 {
		return commonv1.Invalid("decision_sequence", 0, "at least 1")
	}
	if r.ExcessBurstCapacity != nil {
		if e := r.GetExcessBurstCapacity(); math.IsNaN(e) || math.IsInf(e, 0) {
			return commonv1.Invalid("excess_burst_capacity", e, "a finite number")
		}
	}
	if len(r.GetReason()) > 1024 {
		return commonv1.Invalid("reason", r.GetReason()[:32]+"…", "at most 1024 bytes")
	}
	if err := commonv1.ValidateKeepAliveState("keep_alive_state", r.GetKeepAliveState()); err != nil {
		return err
	}
	if r.GetPredictedIdle() && r.GetDesiredReplicas() != 0 {
		return commonv1.Invalid("predicted_idle", true, fmt.Sprintf("only with desired_replicas 0, not %d", r.GetDesiredReplicas()))
	}
	return nil
}

// Validate implements the validation interceptor's contract.
func (r *GetScaleRequest) Validate() error { return r.GetTarget().ValidateField("target") }

// Validate implements the validation interceptor's contract.
func (r *DeployRequest) Validate() error {
	if err := r.GetFunction().validateField("function"); err != nil {
		return err
	}
	return r.GetSpec().validateField("spec")
}

// Validate implements the validation interceptor's contract.
func (r *UndeployRequest) Validate() error { return r.GetFunction().validateField("function") }

// Validate implements the validation interceptor's contract.
func (r *UpdateRequest) Validate() error {
	if err := r.GetFunction().validateField("function"); err != nil {
		return err
	}
	if err := r.GetSpec().validateField("spec"); err != nil {
		return err
	}
	if r.Replicas != nil && (r.GetReplicas() < 0 || r.GetReplicas() > MaxReplicas) {
		return commonv1.Invalid("replicas", r.GetReplicas(), fmt.Sprintf("0 to %d", MaxReplicas))
	}
	return nil
}

func (f *FunctionRef) validateField(field string) error {
	if f == nil {
		return commonv1.Invalid(field, "<missing>", "a function reference with namespace and name")
	}
	if err := commonv1.ValidateLabel(field+".namespace", f.GetNamespace()); err != nil {
		return err
	}
	return commonv1.ValidateLabel(field+".name", f.GetName())
}

func (s *FunctionSpec) validateField(field string) error {
	if s == nil {
		return commonv1.Invalid(field, "<missing>", "a function spec")
	}
	if s.GetImage() == "" || strings.ContainsAny(s.GetImage(), " \t\n") {
		return commonv1.Invalid(field+".image", s.GetImage(), "a container image reference without spaces")
	}
	if err := validateTopic(field+".input_topic", s.GetInputTopic(), true); err != nil {
		return err
	}
	if err := validateTopic(field+".output_topic", s.GetOutputTopic(), false); err != nil {
		return err
	}
	if s.GetBrokers() == "" {
		return commonv1.Invalid(field+".brokers", "", "comma-separated host:port list")
	}
	for _, b := range strings.Split(s.GetBrokers(), ",") {
		if i := strings.LastIndexByte(b, ':'); i <= 0 || i == len(b)-1 {
			return commonv1.Invalid(field+".brokers", s.GetBrokers(), "comma-separated host:port list")
		}
	}
	if m := s.GetMaxReplicas(); m < 0 || m > MaxReplicas {
		return commonv1.Invalid(field+".max_replicas", m, fmt.Sprintf("0 to %d", MaxReplicas))
	}
	if d := s.GetIdleTimeout(); d != nil && (!d.IsValid() || d.AsDuration() < 0) {
		return commonv1.Invalid(field+".idle_timeout", d.AsDuration(), "a duration at least 0")
	}
	if n := len(s.GetImage()); n > MaxImage {
		return commonv1.Invalid(field+".image", s.GetImage(), fmt.Sprintf("at most %d bytes", MaxImage))
	}
	if n := len(s.GetBrokers()); n > MaxBrokers {
		return commonv1.Invalid(field+".brokers", s.GetBrokers(), fmt.Sprintf("at most %d bytes", MaxBrokers))
	}
	if n := len(s.GetConsumerGroup()); n > MaxConsumerGroup || !commonv1.IsText(s.GetConsumerGroup()) {
		return commonv1.Invalid(field+".consumer_group", s.GetConsumerGroup(), fmt.Sprintf("at most %d bytes of text", MaxConsumerGroup))
	}
	return validateEnv(field+".env", s.GetEnv())
}

// Bounds of a FunctionSpec: what a Deployment's container holds in
// practice, far below what would make the actuator's memory or the API
// server's object size a concern.
const (
	MaxImage         = 1024
	MaxBrokers       = 4096
	MaxConsumerGroup = 255
	MaxEnv           = 128
	MaxEnvValue      = 32 << 10
	MaxEnvTotal      = 256 << 10
)

// validateEnv checks the extra environment: at most MaxEnv variables with
// names Kubernetes accepts, values of at most MaxEnvValue bytes, MaxEnvTotal
// in all.
func validateEnv(field string, env map[string]string) error {
	if n := len(env); n > MaxEnv {
		return commonv1.Invalid(field, fmt.Sprintf("%d entries", n), fmt.Sprintf("at most %d entries", MaxEnv))
	}
	total := 0
	for k, v := range env {
		if !isEnvName(k) {
			return commonv1.Invalid(field, k, "names of 1 to 256 letters, digits, '_', '-' or '.', not starting with a digit")
		}
		if len(v) > MaxEnvValue {
			return commonv1.Invalid(fmt.Sprintf("%s[%s]", field, commonv1.Prefix(k)), v, fmt.Sprintf("at most %d bytes", MaxEnvValue))
		}
		total += len(k) + len(v)
	}
	if total > MaxEnvTotal {
		return commonv1.Invalid(field, fmt.Sprintf("%d bytes", total), fmt.Sprintf("at most %d bytes of names and values", MaxEnvTotal))
	}
	return nil
}

// isEnvName is Kubernetes' rule for an environment variable name.
func isEnvName(k string) bool {
	if k == "" || len(k) > 256 || (k[0] >= '0' && k[0] <= '9') {
		return false
	}
	for i := 0; i < len(k); i++ {
		if !isEnvChar(k[i]) {
			return false
		}
	}
	return true
}

func isEnvChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.'
}

// validateTopic applies Kafka's topic name rules: 1-249 of [a-zA-Z0-9._-],
// and not "." or "..".
func validateTopic(field, topic string, required bool) error {
	if topic == "" {
		if required {
			return commonv1.Invalid(field, topic, "a Kafka topic name")
		}
		return nil
	}
	if len(topic) > 249 || topic == "." || topic == ".." {
		return commonv1.Invalid(field, topic, "a Kafka topic name (1-249 of a-z A-Z 0-9 . _ -)")
	}
	for _, c := range topic {
		if !isTopicChar(c) {
			return commonv1.Invalid(field, topic, "a Kafka topic name (1-249 of a-z A-Z 0-9 . _ -)")
		}
	}
	return nil
}

func isTopicChar(c rune) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	default:
		return c == '.' || c == '_' || c == '-'
	}
}
