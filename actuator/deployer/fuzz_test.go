package deployer

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	functionsv1alpha1 "github.com/tidalscale/tidal/apis/functions/v1alpha1"
)

// FuzzValidate builds a Function from any values (a Function object or a
// Deploy call carries all of them): a refusal is a short *FieldError that
// names a field and quotes a bounded prefix; an accepted function builds a
// Deployment whose names and labels the API server accepts, with the
// user's container and the sidecar reading the function's topics.
func FuzzValidate(f *testing.F) {
	type seed struct {
		ns, name, image, env string
		port                 int32
		in, out, protocol    string
		brokers, group       string
	}
	for _, s := range []seed{
		{"default", "square", "example/square:1", "MODE", 8080, "numbers", "", "", "k1:9092,k2:9092", ""},
		{"default", "square", "example/square:1", "MODE", 0, "numbers", "squares", "grpc", "k1:9092", "g"},
		{"Default", "sq.uare", "example/square:1", "1MODE", 65536, ".", "..", "http2", "k1", " "},
		{"default", "square", " example/square:1", "MODE=", -1, strings.Repeat("t", 250), "a b", "", ":9092", "\t"},
		{"default", "square", "ex\nample", "MODE", 80, "in\x00", "out", "", "k1:", ""},
		{"n\x1b[2J", "s\nquare", "i", "E", 1, "in", "", "", "k:1", ""},
		{strings.Repeat("n", 5000), strings.Repeat("s", 5000), strings.Repeat("\xff", 5000), strings.Repeat("E", 5000), 1,
			strings.Repeat("t", 5000), strings.Repeat("o", 5000), strings.Repeat("p", 5000), strings.Repeat("b", 5000), strings.Repeat("g", 5000)},
		{"default", "square", "img", "E", 1, "in", "out", "grpc", strings.Repeat("\x1b", 5000) + ":1", "g"},
	} {
		f.Add(s.ns, s.name, s.image, s.env, s.port, s.in, s.out, s.protocol, s.brokers, s.group)
	}
	f.Fuzz(func(t *testing.T, ns, name, image, env string, port int32, in, out, protocol, brokers, group string) {
		fn := Function{
			Namespace: ns, Name: name,
			Container: corev1.Container{Image: image, Env: []corev1.EnvVar{{Name: env, Value: "v"}}},
			Protocol:  functionsv1alpha1.Protocol(protocol),
			Input:     in, Output: out, ConsumerGroup: group,
		}
		if port != 0 {
			fn.Container.Ports = []corev1.ContainerPort{{ContainerPort: port}}
		}
		if brokers != "" {
			fn.Brokers = strings.Split(brokers, ",")
		}
		err := fn.Validate()
		if err != nil {
			var fe *FieldError
			msg := err.Error()
			if !errors.As(err, &fe) || fe.Field == "" || !strings.Contains(msg, "invalid "+fe.Field+" ") {
				t.Fatalf("error %q names no field", msg)
			}
			if len(msg) >= 1024 || !utf8.ValidString(msg) || strings.ContainsFunc(msg, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
				t.Fatalf("error of %d bytes, want a short line of UTF-8 text: %.300q", len(msg), msg)
			}
			return
		}
		d, err := Deployment(&fn, "projectriff/function-sidecar:0.0.7", 1)
		if err != nil {
			t.Fatalf("valid function %+v: Deployment: %v", fn, err)
		}
		if errs := validation.IsDNS1123Subdomain(*d.Name); len(errs) > 0 {
			t.Fatalf("Deployment name %q: %v", *d.Name, errs)
		}
		if errs := validation.IsDNS1123Label(*d.Namespace); len(errs) > 0 {
			t.Fatalf("Deployment namespace %q: %v", *d.Namespace, errs)
		}
		for k, v := range d.Labels {
			if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
				t.Fatalf("label %s=%q: %v", k, v, errs)
			}
		}
		cs := d.Spec.Template.Spec.Containers
		if len(cs) != 2 || *cs[0].Name != ContainerMain || *cs[0].Image != image || *cs[1].Name != ContainerSidecar {
			t.Fatalf("containers %+v, want main (image %q) and sidecar", cs, image)
		}
		if !slices.Contains(cs[1].Args, in) || !slices.Contains(cs[1].Args, fn.output()) {
			t.Fatalf("sidecar args %q lack the topics %q and %q", cs[1].Args, in, fn.output())
		}
	})
}
