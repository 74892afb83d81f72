package deployer

import (
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	functionsv1alpha1 "github.com/tidalscale/tidal/apis/functions/v1alpha1"
)

func validFunction() Function {
	return Function{
		Namespace: "ns", Name: "square", OwnerUID: "uid-1",
		Container: corev1.Container{Name: "user", Image: "example/square:1", Env: []corev1.EnvVar{{Name: "MODE", Value: "fast"}}},
		Protocol:  functionsv1alpha1.ProtocolGRPC,
		Input:     "numbers",
		Brokers:   []string{"k1:9092", "k2:9092"},
	}
}

// applied decodes an apply configuration as the API server would.
func applied(t *testing.T, f *Function) *appsv1.Deployment {
	t.Helper()
	ac, err := Deployment(f, "sidecar:1", 0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(ac)
	if err != nil {
		t.Fatal(err)
	}
	var d appsv1.Deployment
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	return &d
}

func TestDeployment(t *testing.T) {
	f := validFunction()
	d := applied(t, &f)
	if d.Name != "square" || d.Namespace != "ns" || *d.Spec.Replicas != 0 {
		t.Errorf("deployment %s/%s replicas %d, want ns/square at 0", d.Namespace, d.Name, *d.Spec.Replicas)
	}
	if got, want := d.Spec.Selector.MatchLabels, map[string]string{"function": "square"}; !maps.Equal(got, want) {
		t.Errorf("selector = %v, want %v", got, want)
	}
	if d.Labels["function"] != "square" || d.Spec.Template.Labels["function"] != "square" {
		t.Errorf("labels %v, template labels %v: want function=square on both", d.Labels, d.Spec.Template.Labels)
	}
	if len(d.OwnerReferences) != 1 || d.OwnerReferences[0].Kind != "Function" || d.OwnerReferences[0].UID != "uid-1" ||
		d.OwnerReferences[0].Controller == nil || !*d.OwnerReferences[0].Controller {
		t.Errorf("owner references = %+v, want the controlling Function", d.OwnerReferences)
	}
	cs := d.Spec.Template.Spec.Containers
	if len(cs) != 2 || cs[0].Name != "main" || cs[1].Name != "sidecar" {
		t.Fatalf("containers = %+v, want main and sidecar", cs)
	}
	if cs[0].Image != "example/square:1" {
		t.Errorf("main image = %q", cs[0].Image)
	}
	wantEnv := []corev1.EnvVar{{Name: "MODE", Value: "fast"}, {Name: "RIFF_FUNCTION_INVOKER_PROTOCOL", Value: "grpc"},
		{Name: "HTTP_PORT", Value: "8080"}, {Name: "GRPC_PORT", Value: "10382"}}
	if !slices.Equal(wantEnv, cs[0].Env) {
		t.Errorf("main env = %v, want %v", cs[0].Env, wantEnv)
	}
	wantArgs := []string{"--inputs", "numbers", "--outputs", "replies", "--group", "square", "--protocol", "grpc",
		"--port", "10382", "--brokers", "k1:9092,k2:9092"}
	if !slices.Equal(wantArgs, cs[1].Args) {
		t.Errorf("sidecar args = %q, want %q", cs[1].Args, wantArgs)
	}
	if cs[1].Image != "sidecar:1" {
		t.Errorf("sidecar image = %q", cs[1].Image)
	}
	env := map[string]string{}
	for _, e := range cs[1].Env {
		env[e.Name] = e.Value
	}
	if env["KAFKA_BROKERS"] != "k1:9092,k2:9092" || env["INPUT_TOPIC"] != "numbers" || env["OUTPUT_TOPIC"] != "replies" || env["CONSUMER_GROUP"] != "square" {
		t.Errorf("sidecar env = %v", env)
	}

	// Without an owner, no reference; an explicit group and output win.
	f.OwnerUID, f.ConsumerGroup, f.Output, f.Protocol = "", "g", "out", ""
	d = applied(t, &f)
	if len(d.OwnerReferences) != 0 {
		t.Errorf("owner references = %+v, want none", d.OwnerReferences)
	}
	args := strings.Join(d.Spec.Template.Spec.Containers[1].Args, " ")
	if !strings.Contains(args, "--outputs out --group g --protocol http --port 8080") {
		t.Errorf("sidecar args = %q", args)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Function)
		field  string
	}{
		{"valid", func(*Function) {}, ""},
		{"no image", func(f *Function) { f.Container.Image = "" }, "spec.container.image"},
		{"image with space", func(f *Function) { f.Container.Image = "a b" }, "spec.container.image"},
		{"bad env name", func(f *Function) { f.Container.Env = []corev1.EnvVar{{Name: "1=x"}} }, "spec.container.env[0].name"},
		{"bad port", func(f *Function) { f.Container.Ports = []corev1.ContainerPort{{ContainerPort: 70000}} }, "spec.container.ports[0].containerPort"},
		{"no input", func(f *Function) { f.Input = "" }, "spec.input"},
		{"bad input", func(f *Function) { f.Input = "a/b" }, "spec.input"},
		{"dot output", func(f *Function) { f.Output = ".." }, "spec.output"},
		{"bad protocol", func(f *Function) { f.Protocol = "stdio" }, "spec.protocol"},
		{"no brokers", func(f *Function) { f.Brokers = nil }, "brokers"},
		{"bad broker", func(f *Function) { f.Brokers = []string{"k1"} }, "brokers"},
		{"bad name", func(f *Function) { f.Name = "Square" }, "metadata.name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := validFunction()
			tt.mutate(&f)
			err := f.Validate()
			if tt.field == "" {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != tt.field {
				t.Fatalf("Validate = %v, want a FieldError on %s", err, tt.field)
			}
			if !strings.Contains(err.Error(), "function ns/") {
				t.Errorf("error %q does not name the function", err)
			}
		})
	}
}

func TestCap(t *testing.T) {
	i32 := func(v int32) *int32 { return &v }
	tests := []struct {
		name       string
		max        *int32
		partitions *int32
		noTopic    bool
		want       int32
	}{
		{"partitions", nil, i32(6), false, 6},
		{"maxReplicas below partitions", i32(4), i32(6), false, 4},
		{"maxReplicas above partitions", i32(10), i32(6), false, 6},
		{"default partitions", nil, nil, false, 1},
		{"missing topic", i32(3), nil, true, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fn := &functionsv1alpha1.Function{Spec: functionsv1alpha1.FunctionSpec{MaxReplicas: tt.max}}
			var topic *functionsv1alpha1.Topic
			if !tt.noTopic {
				topic = &functionsv1alpha1.Topic{Spec: functionsv1alpha1.TopicSpec{Partitions: tt.partitions}}
			}
			if got := Cap(fn, topic); got != tt.want {
				t.Errorf("Cap = %d, want %d", got, tt.want)
			}
		})
	}
}
