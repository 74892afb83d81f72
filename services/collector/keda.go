package main

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/lru"

	"github.com/tidalscale/tidal/collector/dispatch"
	"github.com/tidalscale/tidal/collector/kedascaler"
	"github.com/tidalscale/tidal/collector/lag"
	"github.com/tidalscale/tidal/collector/targets"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	"github.com/tidalscale/tidal/services/server"
	"github.com/tidalscale/tidal/shard/bucket"
)

// deciderRouter is kedascaler.Router over the collector's streams: the
// owner by the hub's rendezvous hashing, the connection the stream uses.
type deciderRouter struct {
	hub     *dispatch.Hub
	streams *dispatch.Streams
}

func (r deciderRouter) Owner(ref *commonv1.TargetRef) (string, bool) { return r.hub.DeciderOf(ref) }

func (r deciderRouter) Conn(addr string) (grpc.ClientConnInterface, bool) {
	conn, ok := r.streams.Conn(addr)
	if !ok {
		return nil, false
	}
	return conn, true
}

// kubeTargets is kedascaler.Targets over the discovery's informer caches.
type kubeTargets struct{ disc *targets.Discovery }

func (k kubeTargets) Target(f kedascaler.Follow) (*commonv1.TargetRef, error) {
	var (
		ref *commonv1.TargetRef
		err error
	)
	switch f.Kind {
	case kedascaler.KindPodAutoscaler:
		ref, err = k.disc.PodAutoscalerTarget(f.Namespace, f.Name)
	case kedascaler.KindFunction:
		ref, err = k.disc.FunctionTarget(f.Namespace, f.Name)
	default:
		return nil, fmt.Errorf("%s: unknown kind", f)
	}
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("%w: no %s in the cluster", kedascaler.ErrNoObject, f)
	}
	if err != nil {
		return nil, fmt.Errorf("look up %s: %w", f, err)
	}
	return ref, nil
}

// bucketOwners is kedascaler.Owners over the collector's bucket Leases.
type bucketOwners struct{ buckets *bucket.Set }

func (b bucketOwners) Owner(ref *commonv1.TargetRef) (string, bool) {
	return b.buckets.Owner(ref.Key())
}

// kedaInline wires inline Kafka: triggers measured by this replica's lag
// reader into its hub, KEDA's arithmetic from tidal's own lag strategy
// (kedascaler.NewKafkaScaler), and with buckets the owner of each trigger's
// bucket, reached over the collectors' mutual TLS. Close the returned pool once the server has stopped.
func kedaInline(cfg *config, hub *dispatch.Hub, fetcher *lag.Fetcher, buckets *bucket.Set, reg prometheus.Registerer, log *zap.Logger) (*kedascaler.Inline, *kedascaler.PeerPool, error) {
	opt, err := cfg.server.DialOption(server.RoleCollector)
	if err != nil {
		return nil, nil, err
	}
	peers := kedascaler.NewPeerPool(func(addr string) (*grpc.ClientConn, error) { return grpc.NewClient(addr, opt) })
	in := &kedascaler.Inline{Peers: peers}
	var owns func(*commonv1.TargetRef) bool
	if buckets != nil {
		in.Owners = bucketOwners{buckets}
		owns = func(ref *commonv1.TargetRef) bool { return buckets.Owns(ref.Key()) }
	}
	in.Triggers = kedascaler.NewTriggers(cfg.keda, hub, fetcher, kedascaler.NewKafkaScaler, owns, reg, log.With(zap.String("component", "keda")))
	return in, peers, nil
}

// scaledObjectsGVR is KEDA's ScaledObject.
var scaledObjectsGVR = schema.GroupVersionResource{Group: "keda.sh", Version: "v1alpha1", Resource: "scaledobjects"}

// Bounds of kubeScaledObjects' cache: KEDA calls for each trigger every
// pollingInterval and HPA sync, and one read per ScaledObject and TTL is
// enough to see a changed metricType.
const (
	scaledObjectTTL      = 30 * time.Second
	maxScaledObjects     = 4096
	maxScaledObjectBytes = 64 << 10 // of one trigger's metadata, as KEDA would send it
)

// kubeScaledObjects is kedascaler.ScaledObjects over the API server: a
// GET per ScaledObject, remembered (answer or error) for scaledObjectTTL,
// at most maxScaledObjects of them, the least recently used forgotten first.
type kubeScaledObjects struct {
	dyn   dynamic.Interface
	now   func() time.Time
	cache *lru.Cache // of scaledObjectEntry by namespace/name
}

type scaledObjectEntry struct {
	at       time.Time
	triggers []kedascaler.ScaledObjectTrigger
	err      error
}

func newKubeScaledObjects(dyn dynamic.Interface) *kubeScaledObjects {
	return &kubeScaledObjects{dyn: dyn, now: time.Now, cache: lru.New(maxScaledObjects)}
}

// Triggers implements kedascaler.ScaledObjects.
func (k *kubeScaledObjects) Triggers(ctx context.Context, namespace, name string) ([]kedascaler.ScaledObjectTrigger, error) {
	key := namespace + "/" + name
	now := k.now()
	if v, ok := k.cache.Get(key); ok {
		if e := v.(scaledObjectEntry); now.Sub(e.at) < scaledObjectTTL {
			return e.triggers, e.err
		}
	}
	e := scaledObjectEntry{at: now}
	u, err := k.dyn.Resource(scaledObjectsGVR).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	if err == nil {
		e.triggers, e.err = scaledObjectTriggers(u)
	} else {
		// Not found, no KEDA CRDs, not allowed: remembered too, so a
		// cluster without KEDA's CRDs costs one read per TTL.
		e.err = fmt.Errorf("ScaledObject %s: %w", key, err)
	}
	if ctx.Err() != nil {
		return nil, e.err // the caller gave up; nothing learnt
	}
	k.cache.Add(key, e)
	return e.triggers, e.err
}

// scaledObjectTriggers reads spec.triggers: type, metricType and metadata.
func scaledObjectTriggers(u *unstructured.Unstructured) ([]kedascaler.ScaledObjectTrigger, error) {
	raw, _, err := unstructured.NestedSlice(u.Object, "spec", "triggers")
	if err != nil {
		return nil, fmt.Errorf("ScaledObject %s/%s spec.triggers: %w", u.GetNamespace(), u.GetName(), err)
	}
	out := make([]kedascaler.ScaledObjectTrigger, 0, len(raw))
	for i, r := range raw {
		m, ok := r.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("ScaledObject %s/%s spec.triggers[%d]: not an object", u.GetNamespace(), u.GetName(), i)
		}
		tr := kedascaler.ScaledObjectTrigger{Metadata: map[string]string{}}
		tr.Type, _, _ = unstructured.NestedString(m, "type")
		tr.MetricType, _, _ = unstructured.NestedString(m, "metricType")
		md, _, _ := unstructured.NestedMap(m, "metadata")
		size := 0
		for k, v := range md {
			s, ok := v.(string)
			if !ok {
				continue // KEDA's CRD holds strings; anything else matches no trigger
			}
			if size += len(k) + len(s); size > maxScaledObjectBytes {
				break // more than KEDA would send: matches no trigger
			}
			tr.Metadata[k] = s
		}
		out = append(out, tr)
	}
	return out, nil
}
