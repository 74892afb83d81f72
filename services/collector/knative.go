package main

import (
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"k8s.io/client-go/kubernetes"

	"github.com/tidalscale/tidal/collector/dispatch"
	"github.com/tidalscale/tidal/collector/targets"
	"github.com/tidalscale/tidal/knativeconfig"
	deciderv1 "github.com/tidalscale/tidal/proto/tidal/decider/v1"
	"github.com/tidalscale/tidal/strategy/kpaconfig"
)

// knativeConfig follows Knative's ConfigMaps (--knative): each edit goes to
// the discovery, which measures every Knative PodAutoscaler again with it,
// and to the deciders, which resolve every KPA target with it.
func knativeConfig(cfg *config, kube kubernetes.Interface, disc *targets.Discovery, hub *dispatch.Hub,
	reg prometheus.Registerer, log *zap.Logger,
) (*knativeconfig.Watcher, error) {
	kn := cfg.targets.Knative
	w, err := knativeconfig.New(knativeconfig.Options{
		Namespace: kn.Namespace,
		Base: knativeconfig.Snapshot{Autoscaler: kn.Autoscaler, Deployment: kpaconfig.DefaultDeployment(),
			Network: knativeconfig.DefaultNetwork()},
		Resync:       cfg.targets.Resync,
		MetricPrefix: "tidal_collector",
	}, kube, reg, log)
	if err != nil {
		return nil, err
	}
	w.OnChange(func(s *knativeconfig.Snapshot) {
		disc.SetKnativeConfig(s)
		hub.SetKnativeConfig(deciderConfig(s))
	})
	return w, nil
}

// deciderConfig is what the deciders get of s: the ConfigMaps read from the
// cluster; nil while neither has been (the deciders keep their flags').
func deciderConfig(s *knativeconfig.Snapshot) *deciderv1.KnativeConfig {
	var kc deciderv1.KnativeConfig
	if s.AutoscalerData != nil {
		kc.Autoscaler = &deciderv1.ConfigMapData{Data: s.AutoscalerData}
	}
	if s.DeploymentData != nil {
		kc.Deployment = &deciderv1.ConfigMapData{Data: s.DeploymentData}
	}
	if kc.Autoscaler == nil && kc.Deployment == nil {
		return nil
	}
	return &kc
}
