package podautoscaler

import (
	"context"
	"fmt"
	"maps"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/tidalscale/tidal/actuator/controller"
	"github.com/tidalscale/tidal/actuator/kparules"
	"github.com/tidalscale/tidal/actuator/scale"
	autoscalingv1alpha1 "github.com/tidalscale/tidal/apis/autoscaling/v1alpha1"
	"github.com/tidalscale/tidal/strategy/kpaconfig"
)

// desiredMetric builds the Metric of pa (spec §6.2 step 4): named like it,
// with its labels and annotations, the stable and panic windows, and the
// target's pods as scrape target unless TBC is -1. A lag PodAutoscaler's
// Metric carries its lag source instead.
func desiredMetric(pa *autoscalingv1alpha1.PodAutoscaler, rev *kpaconfig.Revision, spec *kparules.MetricSpec, target scale.Target, selector string) (*autoscalingv1alpha1.Metric, error) {
	stable, panic, scraped := rev.StableWindow(), rev.PanicWindow(), rev.Scraped()
	if spec != nil {
		stable, panic, scraped = spec.StableWindow, spec.PanicWindow, spec.Scraped
	}
	m := &autoscalingv1alpha1.Metric{
		ObjectMeta: metav1.ObjectMeta{
			Name:        pa.Name,
			Namespace:   pa.Namespace,
			Labels:      maps.Clone(pa.Labels),
			Annotations: maps.Clone(pa.Annotations),
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(pa,
				autoscalingv1alpha1.SchemeGroupVersion.WithKind("PodAutoscaler"))},
		},
		Spec: autoscalingv1alpha1.MetricSpec{
			StableWindow: metav1.Duration{Duration: stable},
			PanicWindow:  &metav1.Duration{Duration: panic},
		},
	}
	if d := rev.ScaleDownDelay(); d > 0 && pa.Spec.Strategy != autoscalingv1alpha1.StrategyLag {
		m.Spec.ScaleDownDelay = &metav1.Duration{Duration: d}
	}
	if selector != "" {
		sel, err := metav1.ParseToLabelSelector(selector)
		if err != nil {
			return nil, fmt.Errorf("target %s: selector %q: %w", target, selector, err)
		}
		m.Spec.Selector = sel
		if scraped && pa.Spec.Strategy != autoscalingv1alpha1.StrategyLag {
			m.Spec.ScrapeTarget = target.Name
		}
	}
	if pa.Spec.Strategy == autoscalingv1alpha1.StrategyLag {
		m.Spec.Lag = pa.Spec.Lag.DeepCopy()
	}
	return m, nil
}

// Converge creates pa's Metric or brings it to the desired spec.
func (k *tidalKind) Converge(ctx context.Context, p *tidalPass) error {
	pa := p.PA
	want, err := desiredMetric(pa, &p.Input.Revision, p.Result.Metric, p.Target, p.Scale.Selector)
	if err != nil {
		return err
	}
	client := k.tidal.AutoscalingV1alpha1().Metrics(pa.Namespace)
	// Read now, not in Observe: the first reconcile's create may have
	// reached the cache meanwhile.
	have, err := k.metrics.Metrics(pa.Namespace).Get(pa.Name)
	if apierrors.IsNotFound(err) {
		_, err = client.Create(ctx, want, metav1.CreateOptions{FieldManager: scale.FieldManager})
		if apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create metric %s/%s: the cache is behind: %w", pa.Namespace, pa.Name, err)
		}
		if err != nil {
			return fmt.Errorf("create metric %s/%s: %w", pa.Namespace, pa.Name, err)
		}
		return nil
	}
	if err != nil {
		return err
	}
	if !metav1.IsControlledBy(have, pa) {
		return fmt.Errorf("metric %s/%s exists and is not controlled by the podautoscaler", pa.Namespace, pa.Name)
	}
	if equality.Semantic.DeepEqual(have.Spec, want.Spec) && maps.Equal(have.Labels, want.Labels) &&
		maps.Equal(have.Annotations, want.Annotations) {
		return nil
	}
	upd := have.DeepCopy()
	upd.Spec, upd.Labels, upd.Annotations = want.Spec, want.Labels, want.Annotations
	if _, err := client.Update(ctx, upd, metav1.UpdateOptions{FieldManager: scale.FieldManager}); err != nil {
		return fmt.Errorf("update metric %s/%s: %w", pa.Namespace, pa.Name, err)
	}
	return nil
}

// deleteOrphanMetric deletes the Metric of a deleted PodAutoscaler without
// waiting for the garbage collector, which may take its discovery period to
// act on a newly installed kind.
func (k *tidalKind) deleteOrphanMetric(ctx context.Context, pa cache.ObjectName) error {
	m, err := k.metrics.Metrics(pa.Namespace).Get(pa.Name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if owner, ok := controller.Owner(m, autoscalingv1alpha1.SchemeGroupVersion.WithKind("PodAutoscaler")); !ok || owner != pa {
		return nil
	}
	uid := m.UID
	err = k.tidal.AutoscalingV1alpha1().Metrics(pa.Namespace).Delete(ctx, pa.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete metric %s: %w", pa, err)
	}
	return nil
}
