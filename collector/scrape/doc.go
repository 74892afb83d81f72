// Package scrape measures request-driven targets by scraping a sample of their
// pods every second, as Knative's autoscaler does (knative.dev/serving v0.50.0 pkg/autoscaler/metrics/stats_scraper.go):
// the sample size of a 95 % confidence interval, old pods first and spares
// shuffled behind them, a 3 s timeout and a capped body per pod, a scrape that
// fails whole when the sample cannot be filled, and the sample's sum
// extrapolated to all ready pods. One tick loop drives every target and one
// bounded pool of workers fetches for all of them: no goroutine or ticker per
// target, and pods' kept-alive connections wait without goroutines.
package scrape
