// Package promtext reads one metric from a body in the Prometheus text
// exposition format (version 0.0.4), for workloads that expose a gauge or
// counter instead of Knative's queue-proxy Stat.
//
// It is not a general parser: the scraper needs one number per pod per
// second, so lines of other metrics are skipped after a prefix check and
// nothing is allocated. prometheus/common's expfmt builds every family of the
// body as protobuf messages; this package is checked against it by a fuzz
// test, which requires the same value wherever expfmt accepts a body.
package promtext
