// Package bucket splits targets among collector replicas. Targets hash into
// a fixed number of buckets (package route); each bucket is owned by the
// replica holding its Kubernetes Lease, through client-go's leaderelection,
// as Knative's autoscaler owns its buckets. A replica that dies loses its
// buckets when their leases expire, within one lease duration, and another
// replica takes them; one that stops cleanly releases them at once.
package bucket

import (
	"context"
	"flag"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/tidalscale/tidal/collector/logkey"
	"github.com/tidalscale/tidal/collector/route"
)

// Config tunes bucket ownership.
type Config struct {
	// Buckets is the number of buckets; 0 turns leases off (one replica
	// owns everything). Every replica must use the same number.
	Buckets int
	// Namespace holds the Leases, named Prefix-<i>-of-<Buckets>.
	Namespace, Prefix string
	// LeaseDuration, RenewDeadline and RetryPeriod are client-go
	// leaderelection's timings.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Identity is this replica's name in the Leases: its gRPC address, so a
	// caller told "owned by X" can reach X.
	Identity string
}

// RegisterFlagsWithPrefix registers the bucket flags with their defaults.
func (c *Config) RegisterFlagsWithPrefix(p string, fs *flag.FlagSet) {
	fs.IntVar(&c.Buckets, p+"buckets", 0, "Buckets the targets are split into, each owned by one collector replica through a Lease; 0 means no leases: this replica measures every target.")
	fs.StringVar(&c.Namespace, p+"lease-namespace", "tidal-system", "Namespace of the bucket Leases.")
	fs.StringVar(&c.Prefix, p+"lease-prefix", "tidal-collector", "Name prefix of the bucket Leases.")
	fs.DurationVar(&c.LeaseDuration, p+"lease-duration", 15*time.Second, "How long a dead replica keeps its buckets.")
	fs.DurationVar(&c.RenewDeadline, p+"renew-deadline", 10*time.Second, "How long an owner keeps trying to renew before it gives a bucket up.")
	fs.DurationVar(&c.RetryPeriod, p+"retry-period", 2*time.Second, "How often replicas try to take or renew a bucket.")
}

// Validate refuses unusable values, naming the flag.
func (c *Config) Validate(p string) error {
	switch {
	case c.Buckets < 0 || c.Buckets > 1000:
		return fmt.Errorf("--%sbuckets %d: want 0 to 1000", p, c.Buckets)
	case c.Buckets == 0:
		return nil
	case c.Namespace == "" || c.Prefix == "":
		return fmt.Errorf("--%slease-namespace %q, --%slease-prefix %q: want both set", p, c.Namespace, p, c.Prefix)
	case c.Identity == "":
		return fmt.Errorf("bucket identity: want this replica's address")
	case !(c.LeaseDuration > c.RenewDeadline && c.RenewDeadline > c.RetryPeriod && c.RetryPeriod > 0):
		return fmt.Errorf("--%slease-duration %s, --%srenew-deadline %s, --%sretry-period %s: want lease > renew > retry > 0",
			p, c.LeaseDuration, p, c.RenewDeadline, p, c.RetryPeriod)
	}
	return nil
}

// Set is this replica's view of bucket ownership.
type Set struct {
	cfg      Config
	client   kubernetes.Interface
	log      *zap.Logger
	onChange func()
	owned    prometheus.Gauge
	// release gives the buckets up when Run ends; tests turn it off to
	// play a replica that dies.
	release bool

	// mu guards mine and holders.
	mu      sync.RWMutex
	mine    []bool
	holders []string
}

// New returns a Set owning nothing yet; onChange is called (from the
// election goroutines) whenever this replica gains or loses a bucket.
func New(cfg Config, client kubernetes.Interface, onChange func(), reg prometheus.Registerer, log *zap.Logger) *Set {
	return &Set{
		cfg: cfg, client: client, log: log, onChange: onChange,
		mine: make([]bool, cfg.Buckets), holders: make([]string, cfg.Buckets), release: true,
		owned: promauto.With(reg).NewGauge(prometheus.GaugeOpts{
			Name: "tidal_collector_buckets_owned",
			Help: "Target buckets this collector replica holds the Lease of.",
		}),
	}
}

// Owns reports whether this replica measures the target key.
func (s *Set) Owns(key string) bool {
	_, mine := s.Owner(key)
	return mine
}

// Owner names the replica holding key's bucket ("" if none is known yet)
// and whether it is this one.
func (s *Set) Owner(key string) (string, bool) {
	b := route.Bucket(key, s.cfg.Buckets)
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.holders[b], s.mine[b]
}

// Owned returns how many buckets this replica holds.
func (s *Set) Owned() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	n := 0
	for _, m := range s.mine {
		if m {
			n++
		}
	}
	return n
}

// Run campaigns for every bucket until ctx ends; on the way out it releases
// the buckets it holds so another replica takes them at once.
func (s *Set) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for b := range s.cfg.Buckets {
		le, err := leaderelection.NewLeaderElector(s.electionConfig(b))
		if err != nil {
			return fmt.Errorf("bucket %d: %w", b, err)
		}
		wg.Go(func() {
			// Run returns when leadership is lost; campaign again.
			for ctx.Err() == nil {
				le.Run(ctx)
			}
		})
	}
	wg.Wait()
	return nil
}

func (s *Set) electionConfig(b int) leaderelection.LeaderElectionConfig {
	name := fmt.Sprintf("%s-%d-of-%d", s.cfg.Prefix, b, s.cfg.Buckets)
	set := func(mine bool) {
		s.mu.Lock()
		changed := s.mine[b] != mine
		s.mine[b] = mine
		if mine {
			s.holders[b] = s.cfg.Identity
		}
		s.mu.Unlock()
		if changed {
			s.owned.Set(float64(s.Owned()))
			if mine {
				s.log.Info("took bucket", logkey.Bucket(b))
			} else {
				s.log.Info("lost bucket", logkey.Bucket(b))
			}
			s.onChange()
		}
	}
	return leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metaFor(s.cfg.Namespace, name),
			Client:     s.client.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: s.cfg.Identity},
		},
		LeaseDuration:   s.cfg.LeaseDuration,
		RenewDeadline:   s.cfg.RenewDeadline,
		RetryPeriod:     s.cfg.RetryPeriod,
		ReleaseOnCancel: s.release,
		Name:            name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) { set(true) },
			OnStoppedLeading: func() { set(false) },
			OnNewLeader: func(id string) {
				s.mu.Lock()
				s.holders[b] = id
				s.mu.Unlock()
			},
		},
	}
}
