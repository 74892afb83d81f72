// Package deployer runs functions: it turns a Function (a container reading
// a Kafka topic) into an apps/v1 Deployment as riff's Deployer did,
// applies it with server-side apply, scales it within
// its partition cap and deletes it.
package deployer

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"

	functionsv1alpha1 "github.com/tidalscale/tidal/apis/functions/v1alpha1"
	"github.com/tidalscale/tidal/keyval"
)

// Labels and container names of a function's Deployment.
const (
	// LabelFunction selects a function's pods, as riff's function=<name>.
	LabelFunction = "function"
	// LabelManagedBy marks objects the Deployer owns.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// ManagedBy is LabelManagedBy's value.
	ManagedBy = "tidal"

	// ContainerMain is the user's container, renamed as in riff.
	ContainerMain = "main"
	// ContainerSidecar moves messages between Kafka and the main container.
	ContainerSidecar = "sidecar"

	// DefaultOutput is the output topic of a Function that names none.
	DefaultOutput = "replies"

	// HTTPPort and GRPCPort are where the main container listens, per
	// protocol (riff v0.0.7).
	HTTPPort = 8080
	GRPCPort = 10382
)

// Function is what the Deployer needs to run one function.
type Function struct {
	Namespace, Name string
	// OwnerUID is the Function object's UID; the Deployment gets a
	// controller reference to it, so deleting the Function deletes the
	// Deployment. Empty means no owner (a Deploy over gRPC without a
	// Function object).
	OwnerUID types.UID
	// Container is the user's container; its name is forced to "main".
	Container corev1.Container
	// Protocol is http or grpc; empty means http.
	Protocol functionsv1alpha1.Protocol
	// Input is the consumed topic; Output the produced one ("" means
	// "replies").
	Input, Output string
	// Brokers are the Kafka bootstrap servers, host:port each.
	Brokers []string
	// ConsumerGroup is the Kafka consumer group; "" means the function's
	// name, as in riff.
	ConsumerGroup string
}

// FromObject converts a Function object, with the cluster's brokers.
func FromObject(fn *functionsv1alpha1.Function, brokers []string) Function {
	return Function{
		Namespace: fn.Namespace, Name: fn.Name, OwnerUID: fn.UID,
		Container: fn.Spec.Container, Protocol: fn.Spec.Protocol,
		Input: fn.Spec.Input, Output: fn.Spec.Output, Brokers: brokers,
	}
}

func (f *Function) String() string { return f.Namespace + "/" + f.Name }

func (f *Function) output() string {
	if f.Output == "" {
		return DefaultOutput
	}
	return f.Output
}

func (f *Function) group() string {
	if f.ConsumerGroup == "" {
		return f.Name
	}
	return f.ConsumerGroup
}

func (f *Function) protocol() functionsv1alpha1.Protocol {
	if f.Protocol == "" {
		return functionsv1alpha1.ProtocolHTTP
	}
	return f.Protocol
}

// FieldError says which field of which function is invalid, and why.
type FieldError struct {
	Function string
	Field    string
	Value    string
	Want     string
}

func (e *FieldError) Error() string {
	fn := e.Function
	if len(fn) > 2*keyval.MaxQuoted+1 || strings.ContainsFunc(fn, func(r rune) bool { return r < ' ' || r == 0x7f || r >= 0x80 }) {
		fn = keyval.Quote(fn) // the name is the field at fault: show it like a value
	}
	return fmt.Sprintf("function %s: invalid %s %s: want %s", fn, e.Field, keyval.Quote(e.Value), e.Want)
}

// Validate checks what the API server would otherwise refuse only after
// something was written, or would accept and run broken.
func (f *Function) Validate() error {
	bad := func(field, value, want string) error {
		return &FieldError{Function: f.String(), Field: field, Value: value, Want: want}
	}
	if errs := validation.IsDNS1123Label(f.Namespace); len(errs) > 0 {
		return bad("metadata.namespace", f.Namespace, "a DNS-1123 label")
	}
	if errs := validation.IsDNS1123Label(f.Name); len(errs) > 0 {
		return bad("metadata.name", f.Name, "a DNS-1123 label (it names the Deployment and labels its pods)")
	}
	c := &f.Container
	// Invalid UTF-8 would reach the API server as U+FFFD (JSON): another image.
	if c.Image == "" || !utf8.ValidString(c.Image) || strings.ContainsFunc(c.Image, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) {
		return bad("spec.container.image", c.Image, "a container image reference without spaces")
	}
	for i, e := range c.Env {
		if errs := validation.IsEnvVarName(e.Name); len(errs) > 0 {
			return bad(fmt.Sprintf("spec.container.env[%d].name", i), e.Name, "an environment variable name")
		}
	}
	for i, p := range c.Ports {
		if p.ContainerPort < 1 || p.ContainerPort > 65535 {
			return bad(fmt.Sprintf("spec.container.ports[%d].containerPort", i), strconv.Itoa(int(p.ContainerPort)), "1 to 65535")
		}
	}
	if err := ValidateTopic(f.Input); err != nil {
		return bad("spec.input", f.Input, err.Error())
	}
	if f.Output != "" {
		if err := ValidateTopic(f.Output); err != nil {
			return bad("spec.output", f.Output, err.Error())
		}
	}
	if p := f.Protocol; p != "" && p != functionsv1alpha1.ProtocolHTTP && p != functionsv1alpha1.ProtocolGRPC {
		return bad("spec.protocol", string(p), "http or grpc")
	}
	if len(f.Brokers) == 0 {
		return bad("brokers", "", "at least one Kafka bootstrap server (--kafka-brokers)")
	}
	for _, b := range f.Brokers {
		if i := strings.LastIndexByte(b, ':'); i <= 0 || i == len(b)-1 {
			return bad("brokers", b, "host:port")
		}
	}
	if f.ConsumerGroup != "" && strings.TrimSpace(f.ConsumerGroup) == "" {
		return bad("consumerGroup", f.ConsumerGroup, "a non-blank Kafka consumer group")
	}
	return nil
}

// ValidateTopic applies Kafka's topic name rules: 1 to 249 of
// [a-zA-Z0-9._-], not "." or "..".
func ValidateTopic(topic string) error {
	if topic == "" || len(topic) > 249 || topic == "." || topic == ".." || strings.ContainsFunc(topic, func(c rune) bool {
		return (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '.' && c != '_' && c != '-'
	}) {
		return errors.New("a Kafka topic name (1-249 of a-z A-Z 0-9 . _ -)")
	}
	return nil
}

// Selector returns the labels selecting f's pods.
func Selector(name string) map[string]string { return map[string]string{LabelFunction: name} }

// Deployment builds f's Deployment as an apply configuration with the given
// replicas, as riff's Deployer does: labels and selector set explicitly, the main
// container (the user's, renamed, with the invoker protocol and ports in its
// env) and the sidecar (consuming the input topic with the function's
// consumer group and producing to the output topic), and a controller
// reference to the Function when it has one.
func Deployment(f *Function, sidecarImage string, replicas int32) (*appsv1ac.DeploymentApplyConfiguration, error) {
	main, err := containerApply(&f.Container)
	if err != nil {
		return nil, fmt.Errorf("function %s: container: %w", f, err)
	}
	port := HTTPPort
	if f.protocol() == functionsv1alpha1.ProtocolGRPC {
		port = GRPCPort
	}
	main.WithName(ContainerMain).WithEnv(
		corev1ac.EnvVar().WithName("RIFF_FUNCTION_INVOKER_PROTOCOL").WithValue(string(f.protocol())),
		corev1ac.EnvVar().WithName("HTTP_PORT").WithValue(strconv.Itoa(HTTPPort)),
		corev1ac.EnvVar().WithName("GRPC_PORT").WithValue(strconv.Itoa(GRPCPort)),
	)
	brokers := strings.Join(f.Brokers, ",")
	sidecar := corev1ac.Container().WithName(ContainerSidecar).WithImage(sidecarImage).
		WithArgs(
			"--inputs", f.Input,
			"--outputs", f.output(),
			"--group", f.group(),
			"--protocol", string(f.protocol()),
			"--port", strconv.Itoa(port),
			"--brokers", brokers,
		).
		WithEnv(
			corev1ac.EnvVar().WithName("WINDOWING_STRATEGY").WithValue("{}"),
			corev1ac.EnvVar().WithName("KAFKA_BROKERS").WithValue(brokers),
			corev1ac.EnvVar().WithName("INPUT_TOPIC").WithValue(f.Input),
			corev1ac.EnvVar().WithName("OUTPUT_TOPIC").WithValue(f.output()),
			corev1ac.EnvVar().WithName("CONSUMER_GROUP").WithValue(f.group()),
		)

	labels := map[string]string{LabelFunction: f.Name, LabelManagedBy: ManagedBy}
	d := appsv1ac.Deployment(f.Name, f.Namespace).
		WithLabels(labels).
		WithSpec(appsv1ac.DeploymentSpec().
			WithReplicas(replicas).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(Selector(f.Name))).
			WithTemplate(corev1ac.PodTemplateSpec().
				WithName(f.Name).
				WithLabels(labels).
				WithSpec(corev1ac.PodSpec().WithContainers(main, sidecar))))
	if f.OwnerUID != "" {
		d.WithOwnerReferences(metav1ac.OwnerReference().
			WithAPIVersion(functionsv1alpha1.SchemeGroupVersion.String()).
			WithKind("Function").
			WithName(f.Name).
			WithUID(f.OwnerUID).
			WithController(true).
			WithBlockOwnerDeletion(true))
	}
	return d, nil
}

// containerApply converts a Container to its apply configuration: the two
// share one JSON form.
func containerApply(c *corev1.Container) (*corev1ac.ContainerApplyConfiguration, error) {
	b, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	var ac corev1ac.ContainerApplyConfiguration
	if err := json.Unmarshal(b, &ac); err != nil {
		return nil, err
	}
	return &ac, nil
}
