// Package bucket splits targets among the replicas of one service (the
// collectors' targets, the actuators' PodAutoscalers). Targets hash into
// a fixed number of buckets (package route); each bucket is owned by the
// replica holding its Kubernetes Lease, through client-go's leaderelection,
// as Knative's autoscaler owns its buckets. A replica that dies loses its
// buckets within one lease duration of its last renewal (plus a retry
// period), and another replica takes them; one that stops cleanly releases
// them at once.
//
// So that replicas share the buckets instead of the first one taking all,
// each replica also holds a member Lease of its own. The live members give
// every bucket a preferred owner by rendezvous hashing. Every replica runs
// an elector for every bucket, so it has watched the holder's renewals when
// the holder dies, but takes a free or expired bucket only if it is the
// bucket's preferred owner among the members still alive (or the bucket
// has stayed free for a lease duration); a holder hands a bucket back when
// its preferred owner is live. Leases stay the only arbiter: no home-made
// consensus.
package bucket

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	coordlisters "k8s.io/client-go/listers/coordination/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/tidalscale/tidal/logkey"
	"github.com/tidalscale/tidal/shard/route"
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

// RegisterFlagsWithPrefix registers the bucket flags with their defaults;
// service names the replicas ("collector", "actuator") in the help and in
// the default Lease prefix.
func (c *Config) RegisterFlagsWithPrefix(p string, fs *flag.FlagSet, service string) {
	fs.IntVar(&c.Buckets, p+"buckets", 0, "Buckets the targets are split into, each owned by one "+service+" replica through a Lease; 0 means no leases: this replica owns every target.")
	fs.StringVar(&c.Namespace, p+"lease-namespace", "tidal-system", "Namespace of the bucket Leases.")
	fs.StringVar(&c.Prefix, p+"lease-prefix", "tidal-"+service, "Name prefix of the bucket Leases.")
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
	case c.LeaseDuration <= c.RenewDeadline || c.RenewDeadline <= c.RetryPeriod || c.RetryPeriod <= 0:
		return fmt.Errorf("--%slease-duration %s, --%srenew-deadline %s, --%sretry-period %s: want lease > renew > retry > 0",
			p, c.LeaseDuration, p, c.RenewDeadline, p, c.RetryPeriod)
	case c.LeaseDuration%time.Second != 0:
		// A Lease records whole seconds: 1.5s would be read back as 1s,
		// and under 1s as 0, so every replica would see every holder dead.
		return fmt.Errorf("--%slease-duration %s: want whole seconds", p, c.LeaseDuration)
	case len(validation.IsDNS1123Label(c.Namespace)) > 0:
		return fmt.Errorf("--%slease-namespace %q: want a namespace name (DNS-1123 label)", p, c.Namespace)
	}
	// The longest bucket and member Lease names must be valid object names,
	// or every election would fail at run time instead of here.
	s := Set{cfg: *c}
	for _, name := range []string{s.bucketName(c.Buckets - 1), s.memberPrefix() + strings.Repeat("z", 13)} {
		if len(validation.IsDNS1123Subdomain(name)) > 0 {
			return fmt.Errorf("--%slease-prefix %q: want a prefix of Lease names such as %q (DNS-1123 subdomain)", p, c.Prefix, name)
		}
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

	// factory and leases watch the Leases of the namespace; built by New,
	// started by Run.
	factory informers.SharedInformerFactory
	leases  coordlisters.LeaseNamespaceLister
	synced  cache.InformerSynced

	// mu guards mine.
	mu   sync.RWMutex
	mine []bool
}

// New returns a Set owning nothing yet; onChange is called (from the
// election goroutines) whenever this replica gains or loses a bucket.
func New(cfg Config, client kubernetes.Interface, onChange func(), reg prometheus.Registerer, log *zap.Logger) *Set {
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(cfg.Namespace))
	inf := factory.Coordination().V1().Leases()
	return &Set{
		cfg: cfg, client: client, log: log, onChange: onChange,
		factory: factory, leases: inf.Lister().Leases(cfg.Namespace), synced: inf.Informer().HasSynced,
		mine: make([]bool, cfg.Buckets),
		owned: promauto.With(reg).NewGauge(prometheus.GaugeOpts{
			Name:        "tidal_buckets_owned",
			Help:        "Target buckets this replica holds the Lease of.",
			ConstLabels: prometheus.Labels{"lease_prefix": cfg.Prefix},
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
	if s.holds(b) {
		return s.cfg.Identity, true
	}
	return s.holder(b), false
}

// holds reports whether this replica holds bucket b.
func (s *Set) holds(b int) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.mine[b]
}

// holder is the live holder of bucket b's Lease, or "".
func (s *Set) holder(b int) string {
	l, err := s.leases.Get(s.bucketName(b))
	if err != nil {
		return ""
	}
	return liveHolder(l, time.Now())
}

// liveHolder is a Lease's holder if its lease has not run out.
func liveHolder(l *coordinationv1.Lease, now time.Time) string {
	sp := l.Spec
	if sp.HolderIdentity == nil || *sp.HolderIdentity == "" || sp.RenewTime == nil || sp.LeaseDurationSeconds == nil {
		return ""
	}
	if sp.RenewTime.Add(time.Duration(*sp.LeaseDurationSeconds) * time.Second).Before(now) {
		return ""
	}
	return *sp.HolderIdentity
}

func (s *Set) bucketName(b int) string {
	return fmt.Sprintf("%s-%d-of-%d", s.cfg.Prefix, b, s.cfg.Buckets)
}

func (s *Set) memberPrefix() string { return s.cfg.Prefix + "-member-" }

func (s *Set) memberName() string {
	h := fnv.New64a()
	_, _ = h.Write([]byte(s.cfg.Identity))
	return s.memberPrefix() + strconv.FormatUint(h.Sum64(), 36)
}

// members lists the live replicas, this one included.
func (s *Set) members() []string {
	out := []string{s.cfg.Identity}
	ls, _ := s.leases.List(labels.Everything())
	now := time.Now()
	for _, l := range ls {
		if !strings.HasPrefix(l.Name, s.memberPrefix()) {
			continue
		}
		if h := liveHolder(l, now); h != "" && h != s.cfg.Identity {
			out = append(out, h)
		}
	}
	return out
}

// preferred is the live member bucket b belongs with.
func (s *Set) preferred(b int) string { return s.preferredWithout(b, "") }

// preferredWithout is the live member bucket b belongs with, leaving out
// gone: the holder of b's Lease when that Lease has run out, whose member
// Lease may outlive it by a renewal.
func (s *Set) preferredWithout(b int, gone string) string {
	ms := s.members()
	if gone != "" && gone != s.cfg.Identity {
		ms = slices.DeleteFunc(ms, func(m string) bool { return m == gone })
	}
	p, _ := route.Owner("bucket-"+strconv.Itoa(b), ms)
	return p
}

// Run campaigns until ctx ends; on the way out it releases what it holds
// so another replica takes it at once.
func (s *Set) Run(ctx context.Context) error {
	s.factory.Start(ctx.Done())
	defer s.factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), s.synced) {
		return nil // ctx ended
	}
	member, err := leaderelection.NewLeaderElector(s.config(s.memberName(), s.leaseLock(s.memberName()), nil))
	if err != nil {
		return fmt.Errorf("member lease: %w", err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			member.Run(ctx)
		}
	})
	for b := range s.cfg.Buckets {
		wg.Go(func() { s.campaign(ctx, b) })
	}
	wg.Wait()
	return nil
}

// campaign runs an election for bucket b until ctx ends. The elector runs
// all the time, on every replica, so that it watches the holder's renewals
// from the start: when the holder dies, the elector that has been watching
// takes the bucket one lease duration after the last renewal, instead of a
// new elector starting its own lease-duration wait only once this replica
// learns it should take over. Its lock (deferringLock) keeps a replica from
// taking a bucket that belongs with another live member.
func (s *Set) campaign(ctx context.Context, b int) {
	for ctx.Err() == nil {
		name := s.bucketName(b)
		lock := &deferringLock{Interface: s.leaseLock(name), set: s, bucket: b}
		le, err := leaderelection.NewLeaderElector(s.config(name, lock, func(mine bool) { s.set(b, mine) }))
		if err != nil {
			s.log.Error("bucket election", logkey.Bucket(b), zap.Error(err))
			return
		}
		bctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		var handback sync.WaitGroup
		handback.Go(func() {
			// Hand the bucket back once its preferred owner is live.
			defer cancel()
			for {
				select {
				case <-done:
					return
				case <-time.After(s.cfg.RetryPeriod):
				}
				if p := s.preferred(b); s.holds(b) && p != s.cfg.Identity {
					s.log.Info("handing bucket to its preferred owner", logkey.Bucket(b), zap.String("owner", p))
					return
				}
			}
		})
		le.Run(bctx)
		close(done)
		handback.Wait()
		s.set(b, false)
	}
}

// errDeferred refuses to take a bucket that belongs with another member.
var errDeferred = errors.New("bucket belongs with another live member: deferring")

// deferringLock is a bucket's Lease lock as client-go's elector sees it,
// with two changes that decide only whether this replica tries to take the
// Lease; the Lease's own optimistic concurrency still decides who gets it:
//
//   - A Lease whose holder has not renewed it within its lease duration
//     (RenewTime + LeaseDurationSeconds, the holder's clock) reads as free
//     to a replica that may take it. The elector alone would wait a lease
//     duration from when it first saw the last renewal, which it polls
//     every retry period with jitter.
//   - Taking a free Lease is deferred while the bucket belongs with another
//     live member (leaving out the expired holder), so replicas share the
//     buckets instead of the first one taking all; once the bucket has been
//     free for a whole lease duration any replica may take it.
//
// The elector calls its lock from one goroutine at a time.
type deferringLock struct {
	resourcelock.Interface
	set    *Set
	bucket int

	// holder is the holder named by the last Get, before any rewriting.
	holder string
	// leading is set once this elector holds the Lease: from then on every
	// write is a renewal or the release.
	leading bool
	// freeSince is when this elector was first deferred from a free Lease;
	// zero while the Lease is held.
	freeSince time.Time
}

var _ resourcelock.Interface = (*deferringLock)(nil)

func (l *deferringLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	rec, raw, err := l.Interface.Get(ctx)
	if err != nil {
		return rec, raw, err
	}
	// The elector restarts its clock only when the raw record changes, and
	// the record's JSON keeps whole seconds: renewals within one second
	// would look like none, and it would time the lease from up to a
	// second before the holder's last renewal. The renewal's microseconds
	// make every renewal a change.
	raw = strconv.AppendInt(raw, rec.RenewTime.UnixMicro(), 10)
	l.holder = rec.HolderIdentity
	me := l.set.cfg.Identity
	if rec.HolderIdentity == "" || rec.HolderIdentity == me {
		return rec, raw, nil
	}
	if !expired(rec, time.Now()) {
		l.freeSince = time.Time{}
		return rec, raw, nil
	}
	if !l.mayTake() {
		return rec, raw, nil // the elector keeps timing it on its own clock
	}
	free := *rec
	free.HolderIdentity = ""
	raw, err = json.Marshal(free)
	if err != nil {
		return nil, nil, fmt.Errorf("lease record: %w", err)
	}
	return &free, strconv.AppendInt(raw, free.RenewTime.UnixMicro(), 10), nil
}

func (l *deferringLock) Create(ctx context.Context, rec resourcelock.LeaderElectionRecord) error {
	l.holder = ""
	return l.take(func() error { return l.Interface.Create(ctx, rec) })
}

func (l *deferringLock) Update(ctx context.Context, rec resourcelock.LeaderElectionRecord) error {
	if l.leading || rec.HolderIdentity == "" {
		return l.Interface.Update(ctx, rec) // a renewal or the release
	}
	return l.take(func() error { return l.Interface.Update(ctx, rec) })
}

// take writes the Lease to take it, if this replica may.
func (l *deferringLock) take(write func() error) error {
	if !l.mayTake() {
		return errDeferred
	}
	if err := write(); err != nil {
		return err
	}
	l.leading = true
	return nil
}

// mayTake says whether this replica may take the bucket now that its Lease
// is free or its holder's has run out.
func (l *deferringLock) mayTake() bool {
	me := l.set.cfg.Identity
	if l.holder == me || l.set.preferredWithout(l.bucket, l.holder) == me {
		return true
	}
	now := time.Now()
	if l.freeSince.IsZero() {
		l.freeSince = now
	}
	// The member it belongs with has not taken it in a lease duration.
	return now.Sub(l.freeSince) >= l.set.cfg.LeaseDuration
}

// expired reports whether a Lease's holder let it run out, by the times the
// holder wrote.
func expired(rec *resourcelock.LeaderElectionRecord, now time.Time) bool {
	return rec.RenewTime.Add(time.Duration(rec.LeaseDurationSeconds) * time.Second).Before(now)
}

func (s *Set) set(b int, mine bool) {
	s.mu.Lock()
	changed := s.mine[b] != mine
	s.mine[b] = mine
	s.mu.Unlock()
	if !changed {
		return
	}
	s.owned.Set(float64(s.Owned()))
	if mine {
		s.log.Info("took bucket", logkey.Bucket(b))
	} else {
		s.log.Info("lost bucket", logkey.Bucket(b))
	}
	s.onChange()
}

func (s *Set) leaseLock(name string) *resourcelock.LeaseLock {
	return &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: s.cfg.Namespace, Name: name},
		Client:     s.client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: s.cfg.Identity},
	}
}

// config is the election of one Lease; held, if set, hears it won or lost.
func (s *Set) config(name string, lock resourcelock.Interface, held func(bool)) leaderelection.LeaderElectionConfig {
	if held == nil {
		held = func(bool) {}
	}
	return leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   s.cfg.LeaseDuration,
		RenewDeadline:   s.cfg.RenewDeadline,
		RetryPeriod:     s.cfg.RetryPeriod,
		ReleaseOnCancel: true, // on stop and on handing a bucket back
		Name:            name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) { held(true) },
			OnStoppedLeading: func() { held(false) },
		},
	}
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
