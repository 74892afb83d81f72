package bucket

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// FuzzConfig parses the bucket flags from any values and validates them:
// an accepted configuration names only Leases the API server accepts (the
// bucket and member Lease names are DNS-1123 subdomains in a DNS-1123
// label namespace) with timings client-go's elector accepts and a Lease
// record can hold (it keeps whole seconds); a refusal names a flag.
func FuzzConfig(f *testing.F) {
	f.Add("4", "tidal-system", "tidal-collector", "15s", "10s", "2s")
	f.Add("0", "", "", "0s", "0s", "0s")
	f.Add("1000", "x", "p", "4s", "3s", "500ms")
	f.Add("1001", "x", "p", "4s", "3s", "500ms")
	f.Add("-1", "x", "p", "4s", "3s", "500ms")
	f.Add("4", "x", "p", "3ms", "2ms", "1ms")
	f.Add("4", "x", "p", "1500ms", "1s", "100ms")
	f.Add("4", "Tidal_System", "Tidal Collector\n", "15s", "10s", "2s")
	f.Add("4", "x", strings.Repeat("p", 300), "15s", "10s", "2s")
	f.Add("4", "x", "p.", "2562047h", "2562046h", "1h")
	f.Add("999999999999", "x", "p", "NaN", "+Inf", "1e300s")
	f.Fuzz(func(t *testing.T, buckets, ns, prefix, lease, renew, retry string) {
		var c Config
		fs := flag.NewFlagSet("fuzz", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		c.RegisterFlagsWithPrefix("", fs, "collector")
		err := fs.Parse([]string{"--buckets=" + buckets, "--lease-namespace=" + ns, "--lease-prefix=" + prefix,
			"--lease-duration=" + lease, "--renew-deadline=" + renew, "--retry-period=" + retry})
		if err != nil {
			return // the flag package's own refusal
		}
		c.Identity = "10.0.0.1:9001"
		if err := c.Validate(""); err != nil {
			if !strings.Contains(err.Error(), "--") {
				t.Fatalf("error %q names no flag", err)
			}
			return
		}
		if c.Buckets < 0 || c.Buckets > 1000 {
			t.Fatalf("accepted %d buckets", c.Buckets)
		}
		if c.Buckets == 0 {
			return
		}
		if c.LeaseDuration <= c.RenewDeadline || c.RenewDeadline <= c.RetryPeriod || c.RetryPeriod <= 0 {
			t.Fatalf("accepted timings lease %s, renew %s, retry %s", c.LeaseDuration, c.RenewDeadline, c.RetryPeriod)
		}
		if c.LeaseDuration < time.Second || c.LeaseDuration%time.Second != 0 {
			t.Fatalf("accepted lease duration %s: a Lease keeps whole seconds", c.LeaseDuration)
		}
		if errs := validation.IsDNS1123Label(c.Namespace); len(errs) > 0 {
			t.Fatalf("accepted namespace %q: %v", c.Namespace, errs)
		}
		s := &Set{cfg: c}
		for _, name := range []string{s.bucketName(0), s.bucketName(c.Buckets - 1), s.memberName()} {
			if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
				t.Fatalf("accepted prefix %q gives Lease name %q: %v", c.Prefix, name, errs)
			}
		}
	})
}
