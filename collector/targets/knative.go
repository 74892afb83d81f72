package targets

import (
	"flag"
	"fmt"
	"maps"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"

	autoscalingv1alpha1 "github.com/tidalscale/tidal/apis/autoscaling/v1alpha1"
	knautoscaling "github.com/tidalscale/tidal/apis/knative/autoscaling/v1alpha1"
	knclient "github.com/tidalscale/tidal/apis/knative/client"
	"github.com/tidalscale/tidal/collector/scrape"
	"github.com/tidalscale/tidal/knativeconfig"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	deciderv1 "github.com/tidalscale/tidal/proto/tidal/decider/v1"
	"github.com/tidalscale/tidal/strategy/kpaconfig"
)

// KnativeConfig makes Knative Serving's PodAutoscalers KPA targets: each
// one of Classes is measured from its Revision's pods (label
// serving.knative.dev/revision), their queue-proxies scraped as for tidal's
// PodAutoscalers, with its autoscaling.knative.dev/* annotations over
// Knative's config-autoscaler.
type KnativeConfig struct {
	Enabled bool
	// Classes are the PodAutoscaler classes measured; empty means Knative's
	// KPA class.
	Classes []string
	// Autoscaler is Knative's config-autoscaler from the flags, in effect
	// until the ConfigMap is read (SetKnativeConfig).
	Autoscaler kpaconfig.Config
	// Namespace is Knative's system namespace, whose ConfigMaps the
	// collector follows.
	Namespace string
	// ClusterDomain ends the private Service's host name a revision is
	// scraped through under a mesh (config-network's
	// mesh-compatibility-mode).
	ClusterDomain string
}

// maxKnativeClasses bounds --knative-classes.
const maxKnativeClasses = 8

// registerFlags registers the Knative flags.
func (k *KnativeConfig) registerFlags(p string, fs *flag.FlagSet) {
	k.Autoscaler = kpaconfig.Default()
	fs.BoolVar(&k.Enabled, p+"knative", false, "Measure Knative Serving's PodAutoscalers of --knative-classes from their Revisions' pods.")
	fs.StringVar(&k.ClusterDomain, p+"cluster-domain", "cluster.local", "Cluster DNS domain: with --knative a revision is scraped through REVISION-private.NAMESPACE.svc.DOMAIN:9090 when config-network's mesh-compatibility-mode says so.")
	fs.StringVar(&k.Namespace, p+"knative-namespace", "knative-serving", "Knative Serving's namespace, whose config-autoscaler and config-network the collector follows with --knative (edits apply at once).")
	k.Classes = []string{knautoscaling.ClassKPA}
	fs.Func(p+"knative-classes", "Comma-separated PodAutoscaler classes (autoscaling.knative.dev/class) measured with --knative (default "+knautoscaling.ClassKPA+").", func(v string) error {
		var classes []string
		for c := range strings.SplitSeq(v, ",") {
			if c = strings.TrimSpace(c); c == "" {
				continue
			}
			if c == knautoscaling.ClassHPA || len(c) > 253 || strings.ContainsAny(c, " /") {
				return fmt.Errorf("%q: not a class tidal measures", commonv1.Prefix(c))
			}
			classes = append(classes, c)
		}
		if len(classes) == 0 || len(classes) > maxKnativeClasses {
			return fmt.Errorf("want 1 to %d classes", maxKnativeClasses)
		}
		k.Classes = classes
		return nil
	})
	fs.Func(p+"knative-config-autoscaler", "Directory holding Knative's config-autoscaler keys, one file per key, in effect with --knative until the ConfigMap in --knative-namespace is read; unset means Knative's defaults.", func(dir string) error {
		data, err := knativeconfig.ReadConfigDir(dir)
		if err != nil {
			return err
		}
		k.Autoscaler, err = kpaconfig.ParseConfig(data)
		return err
	})
}

// SetKnativeConfig makes s the Knative configuration every Knative
// PodAutoscaler is measured with (an operator's edit of config-autoscaler
// or config-network) and measures each again with it.
func (d *Discovery) SetKnativeConfig(s *knativeconfig.Snapshot) {
	d.knative.Store(s)
	if d.crd.Knative == nil {
		return
	}
	d.enqueueAll(d.crd.Knative, "k/")
}

// knativeAutoscaler is config-autoscaler as in effect now.
func (d *Discovery) knativeAutoscaler() kpaconfig.Config {
	if s := d.knative.Load(); s != nil {
		return s.Autoscaler
	}
	return d.cfg.Knative.Autoscaler
}

// knativeMesh is config-network's mesh-compatibility-mode as in effect now,
// as the scraper takes it, and whether the mesh makes pods addressable
// (enable-mesh-pod-addressability).
func (d *Discovery) knativeMesh() (scrape.Mesh, bool) {
	n := knativeconfig.DefaultNetwork()
	if s := d.knative.Load(); s != nil {
		n = s.Network
	}
	switch n.MeshCompatibilityMode {
	case knativeconfig.MeshEnabled:
		return scrape.MeshEnabled, n.EnableMeshPodAddressability
	case knativeconfig.MeshDisabled:
		return scrape.MeshDisabled, n.EnableMeshPodAddressability
	}
	return scrape.MeshAuto, n.EnableMeshPodAddressability
}

// UseKnative watches Knative's PodAutoscalers through the API server of rc
// when the configuration enables it; call it before Start. It does nothing
// otherwise.
func (d *Discovery) UseKnative(rc *rest.Config) error {
	if !d.cfg.Knative.Enabled {
		return nil
	}
	kn, err := knclient.New(rc)
	if err != nil {
		return err
	}
	d.useKnative(kn)
	return nil
}

func (d *Discovery) useKnative(kn knclient.Interface) {
	if len(d.cfg.Knative.Classes) == 0 {
		d.cfg.Knative.Classes = []string{knautoscaling.ClassKPA}
	}
	inf := knclient.NewPodAutoscalerInformer(kn, d.cfg.Namespaces, d.cfg.Resync)
	_, _ = inf.AddEventHandler(d.enqueue("k/"))
	d.crd.Knative = inf
}

// syncKnative makes a Knative PodAutoscaler of a measured class a KPA
// target.
func (d *Discovery) syncKnative(key, ns, name string) error {
	pa, err := knclient.Get[*knautoscaling.PodAutoscaler](d.crd.Knative.GetStore(), ns, name)
	if apierrors.IsNotFound(err) || err == nil && (pa == nil || !slices.Contains(d.cfg.Knative.Classes, pa.Class())) {
		d.release(key)
		return nil
	}
	if err != nil {
		return err
	}
	ref := knativeRef(pa)
	if !d.claim(key, ref, rankPodAutoscaler) {
		return nil
	}
	// The tidal class stands in for Knative's KPA class, which the decider
	// and Knative's annotation validation know.
	ann := pa.Annotations
	if pa.Class() != knautoscaling.ClassKPA {
		ann = maps.Clone(ann)
		ann[knautoscaling.AnnotationClass] = knautoscaling.ClassKPA
	}
	spec := kpaTargetSpec(ref, ann, int32(min(pa.Spec.ContainerConcurrency, kpaconfig.MaxContainerConcurrency)), string(pa.Spec.Reachability),
		autoscalingv1alpha1.DecisionFromAnnotations(pa.Status.Annotations))
	kr := &deciderv1.KnativeRevision{Revision: pa.Revision(), Configuration: pa.Labels[knautoscaling.LabelConfiguration],
		Service: pa.Labels[knautoscaling.LabelService]}
	if commonv1.IsSubdomain(kr.Revision) && commonv1.IsSubdomain(kr.Configuration) && (kr.Service == "" || commonv1.IsSubdomain(kr.Service)) {
		// Knative's own autoscaler labels its metrics so, and exports none
		// for a PodAutoscaler without a configuration label.
		spec.KnativeRevision = kr
	}
	rev, rerr := kpaconfig.NewRevision(d.knativeAutoscaler(), kpaconfig.DefaultDeployment(), ann, pa.Spec.ContainerConcurrency,
		pa.Spec.Reachability != knautoscaling.ReachabilityUnreachable)
	if !d.setSpec(key, spec, rev.StableWindow()+rev.ScaleDownDelay()) {
		return nil
	}
	// The Revision's pods, as Knative's autoscaler counts them, scraped at
	// 9090, queue-proxy's autoscaling metrics port ("http-autometric").
	sel := labels.SelectorFromSet(labels.Set{knautoscaling.LabelRevision: pa.Revision()})
	src := d.setSelector(key, ns, sel, 9090)
	d.sink.SetReadyPods(ref, int32(len(src.ReadyPods(nil))))
	// Knative's reconciler labels its series with the PodAutoscaler's name
	// and its Revision's labels, which may be empty.
	kn := &knRevision{ns: ns, name: name, configuration: pa.Labels[knautoscaling.LabelConfiguration],
		service: pa.Labels[knautoscaling.LabelService], sel: sel}
	d.mu.Lock()
	if a := d.active[key]; a != nil {
		a.kn = kn
	}
	d.mu.Unlock()
	if rerr != nil {
		d.knScrapes.drop(key)
		return d.scrapeRefused(ref, fmt.Errorf("knative podautoscaler %s/%s: %w", ns, name, rerr))
	}
	if !rev.Scraped() {
		// target-burst-capacity -1: the activator's stats are the signal.
		d.scraper.Remove(ref)
		d.knScrapes.drop(key)
		return nil
	}
	mesh, podAddressable := d.knativeMesh()
	tgt := scrape.Target{Ref: ref, Path: "/metrics", StableWindow: rev.StableWindow(), Pods: src, Mesh: mesh,
		Duration: d.knScrapes.observer(key, kn)}
	if svc := pa.Status.MetricsServiceName; svc != "" && len(validation.IsDNS1123Label(svc)) == 0 {
		// The private Service Knative's SKS reconciler made, port 9090, as
		// Knative's scraper reaches it (its urlFromTarget), by its full name.
		tgt.Service = svc + "." + ns + ".svc." + d.cfg.Knative.ClusterDomain + ":9090"
		if podAddressable {
			// Knative's pass-through Host: the Service's name and namespace.
			tgt.PodHost = svc + "." + ns
		}
	}
	d.scraper.Set(tgt)
	return nil
}
