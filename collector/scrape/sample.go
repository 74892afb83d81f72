package scrape

import (
	"math"
	"math/rand/v2"
	"time"
)

// Pod is one ready pod of a target, as the scraper needs it.
type Pod struct {
	// Name is the pod's name.
	Name string
	// Addr is host:port of the pod's metrics endpoint.
	Addr string
	// Start is when the pod started (status.startTime).
	Start time.Time
}

// sampleX is 1.96² · 100 / 5²: a 95 % confidence level, a variance of 100 and
// a margin of error of 5 (Knative's sample_size.go).
const sampleX = 1.96 * 1.96 * 100 / (5 * 5)

// SampleSize is how many of n ready pods a scrape reads: all of them up to 3,
// otherwise the population-mean sample size ⌈n·X / (n + X − 1)⌉ with
// X = 1.96²·100/5², which approaches 16 as n grows.
func SampleSize(n int) int {
	if n <= 3 {
		return max(n, 0)
	}
	return int(math.Ceil(float64(n) * sampleX / (float64(n) + sampleX - 1)))
}

// Order appends pods to dst in the order a scrape tries them and returns
// the result and how many pods the scrape must read. Pods that started at
// least stableWindow before now are old. With fewer old pods than the sample,
// all old pods come first and the young ones follow shuffled; otherwise the
// old pods are shuffled and the young ones follow as spares in their given
// order.
func Order(dst, pods []Pod, now time.Time, stableWindow time.Duration, rnd *rand.Rand) ([]Pod, int) {
	n := SampleSize(len(pods))
	base := len(dst)
	for _, p := range pods {
		if now.Sub(p.Start) >= stableWindow {
			dst = append(dst, p)
		}
	}
	old := len(dst) - base
	for _, p := range pods {
		if now.Sub(p.Start) < stableWindow {
			dst = append(dst, p)
		}
	}
	shuffle := dst[base : base+old] // the old pods
	if old < n {
		shuffle = dst[base+old:] // the young pods
	}
	rnd.Shuffle(len(shuffle), func(i, j int) { shuffle[i], shuffle[j] = shuffle[j], shuffle[i] })
	return dst, n
}
