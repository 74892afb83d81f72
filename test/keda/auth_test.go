package keda

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidalscale/tidal/test/kedavector"
	"github.com/tidalscale/tidal/test/testkit"
)

// TestInlineKafkaAuthThroughKEDA runs the inline Kafka example against a
// kfake broker that requires SCRAM-SHA-512 over TLS, the credentials and
// the broker's CA in a Secret that the scale target's container takes into
// its environment (env valueFrom secretKeyRef), the trigger naming them
// only by usernameFromEnv, passwordFromEnv and caFromEnv, as docs/keda.md
// says: KEDA's operator reads the Secret and forwards the values to tidal.
// The Secret starts with a wrong password: tidal cannot read the lag, KEDA
// reports the trigger failing (Ready False) and the Deployment stays at
// zero under a lag that would scale it. Once the Secret holds the right
// password, KEDA's next poll (which rebuilds a failing scaler, reading the
// environment again) reaches tidal with it, and the Deployment goes to N
// (the HPA) and back to zero without lag; the collector's log never quotes
// either password.
func TestInlineKafkaAuthThroughKEDA(t *testing.T) {
	kedaLog.follow(t)
	const user, secretName = "billing", "kafka-credentials"
	password, wrong := "pw-scram-right-"+strings.ToLower(t.Name()), "pw-scram-wrong-"+strings.ToLower(t.Name())

	server, client, caPEM, err := kedavector.LoopbackTLS()
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"KAFKA_USERNAME": "username", "KAFKA_PASSWORD": "password", "KAFKA_CA": "ca.crt"}

	sc := newInlineScenarioWith(t, inlineSetup{
		broker: func(topic string, parts int32, group string) (*kedavector.Broker, error) {
			return kedavector.NewSecureTopicBroker(topic, parts, group,
				[]kfake.Opt{kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-512", user, password),
					kfake.TLS(server)},
				[]kgo.Opt{kgo.SASL(scram.Auth{User: user, Pass: password}.AsSha512Mechanism()),
					kgo.DialTLSConfig(client)})
		},
		target: func(d *appsv1.Deployment) {
			c := &d.Spec.Template.Spec.Containers[0]
			for _, name := range slices.Sorted(maps.Keys(env)) {
				c.Env = append(c.Env, corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
					LocalObjectReference: corev1.LocalObjectReference{Name: secretName}, Key: env[name]}}})
			}
		},
		edit: func(so *kedav1alpha1.ScaledObject) {
			md := so.Spec.Triggers[0].Metadata
			md["tls"], md["caFromEnv"] = "enable", "KAFKA_CA"
			md["sasl"], md["usernameFromEnv"], md["passwordFromEnv"] = "scram_sha512", "KAFKA_USERNAME", "KAFKA_PASSWORD"
		},
		// The Secret is written below, after the scenario's namespace
		// exists; KEDA fails on the trigger until then.
		notReady: true,
		beforeSO: func(sc *inlineScenario) {
			secret := &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: secretName, Namespace: sc.ns},
				StringData: map[string]string{"username": user, "password": wrong, "ca.crt": string(caPEM)},
			}
			if _, err := sc.c.Client.CoreV1().Secrets(sc.ns).Create(context.Background(), secret, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			// A lag of N × lagThreshold before KEDA first polls.
			sc.setLag(int64(sc.n) * sc.threshold / sc.parts)
		},
	})
	n := sc.n

	// The wrong password: the trigger fails and the Deployment stays at 0.
	var reason string
	testkit.Eventually(t, 2*time.Minute, "KEDA reporting the trigger failing (Ready False) on the wrong password", func() bool {
		var got kedav1alpha1.ScaledObject
		if err := sc.d.kube.Get(context.Background(), keyOf(sc.so), &got); err != nil {
			return false
		}
		ready := got.Status.Conditions.GetReadyCondition()
		reason = fmt.Sprintf("%s %s: %s", ready.Status, ready.Reason, ready.Message)
		return ready.IsFalse()
	}, func() string { return "Ready " + reason })
	t.Logf("wrong password: ScaledObject Ready %s", reason)
	if got := sc.rec.current(); got != 0 {
		t.Errorf("with the wrong password the Deployment went to %d, want 0 (changes %v)", got, sc.rec.changes())
	}

	// The right password: KEDA's next poll reads it, then 0 → N → 0.
	fixed := time.Now()
	sec, err := sc.c.Client.CoreV1().Secrets(sc.ns).Get(context.Background(), secretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sec.Data["password"] = []byte(password)
	if _, err := sc.c.Client.CoreV1().Secrets(sc.ns).Update(context.Background(), sec, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	sc.rec.waitFor(t, 3*time.Minute, fmt.Sprintf("%d replicas once the Secret holds the right password", n), n)
	t.Logf("0 → %d replicas %s after the Secret was fixed; changes %v", n, time.Since(fixed).Round(time.Millisecond), sc.rec.changes())
	sc.hpaName = waitReady(t, sc.d, sc.so)
	waitHPA(t, sc.c, sc.ns, sc.hpaName, n, int64(n)*sc.threshold)

	sc.setLag(0)
	sc.rec.waitFor(t, 2*time.Minute, "0 replicas", 0)
	if got, want := sc.rec.values(), []int32{0, 1, n, 0}; !slices.Equal(got, want) {
		t.Errorf("replicas went %v, want %v (changes %v)", got, want, sc.rec.changes())
	}

	out := sc.sys.Collectors[0].LogTail(1 << 20)
	if !strings.Contains(out, sc.so.Namespace) {
		t.Fatalf("the collector's log never names the scenario's namespace %s; it is not the log under test", sc.so.Namespace)
	}
	for _, p := range []string{password, wrong} {
		if strings.Contains(out, p) {
			t.Errorf("the collector's log quotes a password (%s)", p)
		}
	}
}
