package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Metric tells the collector what to collect for one scale target: which pods
// to scrape and where, over which windows, or which Kafka lag to read. The
// actuator writes one per PodAutoscaler, named like it, as Knative's KPA
// reconciler writes its Metric (knative.dev/serving v0.50.0 pkg/reconciler/autoscaling/resources/metric.go).
//
// +genclient
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=tidal
// +kubebuilder:printcolumn:name="Stable",type=string,JSONPath=`.spec.stableWindow`
// +kubebuilder:printcolumn:name="Panic",type=string,JSONPath=`.spec.panicWindow`
// +kubebuilder:printcolumn:name="Scrape",type=string,JSONPath=`.spec.scrapeTarget`
// +kubebuilder:printcolumn:name="Pods",type=integer,JSONPath=`.status.readyPods`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Metric struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec MetricSpec `json:"spec"`
	// +optional
	Status MetricStatus `json:"status,omitempty"`
}

// MetricSpec is what to collect.
//
// +kubebuilder:validation:XValidation:rule="!has(self.panicWindow) || duration(self.panicWindow) <= duration(self.stableWindow)",message="panicWindow must not exceed stableWindow"
// +kubebuilder:validation:XValidation:rule="!has(self.scrapeTarget) || size(self.scrapeTarget) == 0 || has(self.selector)",message="selector is required when scrapeTarget is set"
type MetricSpec struct {
	// StableWindow is the long averaging window, 6s to 1h in whole seconds
	// (Knative's stable-window).
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('6s') && duration(self) <= duration('1h')",message="stableWindow must be between 6s and 1h"
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+h)?([0-9]+m)?([0-9]+s)?$')",message="stableWindow must be whole seconds, such as 60s or 1m30s"
	StableWindow metav1.Duration `json:"stableWindow"`
	// PanicWindow is the short window used to detect bursts; unset means
	// 10% of StableWindow (Knative's panic-window-percentage default).
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s')",message="panicWindow must be at least 1s"
	// +optional
	PanicWindow *metav1.Duration `json:"panicWindow,omitempty"`
	// ScaleDownDelay is the decider's scale-down delay, resolved from the
	// PodAutoscaler's annotations and config-autoscaler; the collector keeps
	// that much history beyond the stable window, so a decider rebuilt from
	// it decides as one that never stopped. Unset means none.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s') && duration(self) <= duration('1h')",message="scaleDownDelay must be between 0s and 1h"
	// +optional
	ScaleDownDelay *metav1.Duration `json:"scaleDownDelay,omitempty"`

	// ScrapeTarget names what to scrape, as Knative's Metric does (the
	// private service of the revision). Empty means nothing is scraped and
	// only pushed stats count (Knative's target-burst-capacity -1 case).
	// +optional
	ScrapeTarget string `json:"scrapeTarget,omitempty"`
	// Selector picks the pods to scrape; a pod counts when it is Running,
	// Ready and not terminating.
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
	// ScrapePort is the pod port of the queue-proxy metrics endpoint; unset
	// means 9090.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +optional
	ScrapePort *int32 `json:"scrapePort,omitempty"`
	// ScrapePath is the HTTP path of that endpoint; unset means /metrics.
	// +kubebuilder:validation:Pattern=`^/`
	// +optional
	ScrapePath string `json:"scrapePath,omitempty"`

	// Lag, when set, makes the collector read this Kafka consumer lag
	// instead of scraping pods.
	// +optional
	Lag *LagSource `json:"lag,omitempty"`
}

// Condition types of a Metric.
const (
	// MetricConditionReady is True while the collector collects the metric.
	MetricConditionReady = "Ready"
)

// MetricStatus is what the collector observed.
type MetricStatus struct {
	// ObservedGeneration is the generation of the spec this status is for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// ReadyPods is the number of pods the last scrape could choose from.
	// +optional
	ReadyPods int32 `json:"readyPods,omitempty"`
	// LastCollectTime is when data was last recorded for this metric.
	// +optional
	LastCollectTime *metav1.Time `json:"lastCollectTime,omitempty"`
	// Conditions: Ready.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// MetricList is a list of Metrics.
//
// +kubebuilder:object:root=true
type MetricList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Metric `json:"items"`
}
