package scale

import (
	"fmt"
	"sort"

	"github.com/tidalscale/tidal/decider/engine"
	"github.com/tidalscale/tidal/decider/kpa"
	"github.com/tidalscale/tidal/strategy/kpaconfig"
)

// replayStrategy replays each target's samples (as its collector took
// them) through decider/engine, the code the decider runs, with every
// sample on time: each 2 s grid tick sees exactly the samples stamped at
// or before it, as tidal-sim drives the engine. What it decides, and when,
// is the strategy's own part of a load change's latency; whatever the
// live system takes beyond it is tidal's and the API server's. It returns
// each target's changes of desired scale, by target name, with the tick
// in both times of liveDecision.
func replayStrategy(autoscaler map[string]string, ns string, samples map[string][]engine.Sample) (map[string][]liveDecision, error) {
	kcfg, err := kpaconfig.ParseConfig(autoscaler)
	if err != nil {
		return nil, fmt.Errorf("replay: config-autoscaler: %w", err)
	}
	e := engine.New(engine.Config{KPA: kcfg, Deployment: kpaconfig.DefaultDeployment(), TickInterval: kpa.TickInterval})
	type timed struct {
		ref engine.Target
		s   engine.Sample
	}
	var all []timed
	for name, ss := range samples {
		if len(ss) == 0 {
			continue
		}
		ref := engine.Target{Namespace: ns, Name: name, APIVersion: "apps/v1", Kind: "Deployment"}
		if err := e.Upsert(engine.Spec{Target: ref, Strategy: engine.KPA, Reachable: true}, ss[0].At); err != nil {
			return nil, fmt.Errorf("replay %s: %w", name, err)
		}
		for _, s := range ss {
			all = append(all, timed{ref, s})
		}
	}
	if len(all) == 0 {
		return nil, nil
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].s.At.Before(all[j].s.At) })
	out := map[string][]liveDecision{}
	end := all[len(all)-1].s.At
	i := 0
	for g := all[0].s.At.Truncate(kpa.TickInterval); !g.After(end.Add(kpa.TickInterval)); g = g.Add(kpa.TickInterval) {
		for ; i < len(all) && !all[i].s.At.After(g); i++ {
			// A refused sample is refused live too; the engine counts it.
			_, _ = e.Record(all[i].ref, all[i].s, all[i].s.At)
		}
		for _, d := range e.Tick(g) {
			if d.Valid() {
				out[d.Target.Name] = append(out[d.Target.Name], liveDecision{tick: g, seen: g, desired: d.Desired})
			}
		}
	}
	return out, nil
}
