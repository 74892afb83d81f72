// Package tracegen generates Azure Functions traces with the mix of
// invocation patterns Shahrad et al. report for Azure's production
// workload ("Serverless in the Wild", USENIX ATC 2020, §3), for tidal-sim
// to judge keep-alive policies on when the real trace is not at hand. It
// writes the 2019 per-minute format (one file a day) and the 2021
// per-invocation format from the same invocations.
//
// Each function belongs to one class, in these shares (rounded to whole
// functions, the classes then shuffled):
//
//   - timer (16 %, the paper's 15.6 % timer triggers): a fixed period of 1,
//     5, 10, 15, 30, 60, 120 or 240 minutes (equally likely), a random
//     phase, each firing within a second of its time;
//   - regular (14 %, queue, event, storage and orchestration triggers
//     that follow an upstream schedule): a period log-uniform in [2 min,
//     2 h], each gap the period times 1 ± j, j uniform in [0.05, 0.3];
//   - bursty HTTP (15 %): bursts of 2 to 50 requests (uniform) at 0.2 to 5
//     per second (uniform), separated by exponential gaps whose mean is
//     log-uniform in [1 min, 6 h];
//   - diurnal HTTP (20 %): a Poisson process whose rate follows the day,
//     λ(t) = λ0 (1 + 0.8 sin(2π t / 24 h + φ)), λ0 log-uniform in [0.5, 3,600]
//     per hour (the paper's range is eight orders of magnitude; busier
//     functions, always warm under any keep-alive, would only make the
//     replay longer);
//   - rare (35 %, half HTTP, half queue): a Poisson process of 1 to 24 a
//     day (log-uniform).
//
// The shares of rare and busy functions are set so that, as in the
// paper's Figure 5, about 45 % of functions are invoked once an hour or
// less on average and about 81 % once a minute or less; Summarize
// measures a generated trace. Every draw comes from one seeded generator, so the same seed
// gives the same trace, byte for byte.
package tracegen

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tidalscale/tidal/keyval"
)

// Class is a function's invocation pattern.
type Class uint8

const (
	Timer Class = iota
	Regular
	Bursty
	Diurnal
	Rare
)

var classNames = [...]string{"timer", "regular", "bursty", "diurnal", "rare"}

func (c Class) String() string { return classNames[c] }

// ParseClass reads a class's name as String writes it.
func ParseClass(s string) (Class, error) {
	for c, name := range classNames {
		if s == name {
			return Class(c), nil
		}
	}
	return 0, fmt.Errorf("class %s: want one of %s", keyval.Quote(s), strings.Join(classNames[:], ", "))
}

// shares are the classes' shares of functions, in Class order.
var shares = [...]float64{0.16, 0.14, 0.15, 0.20, 0.35}

// Function is one generated function.
type Function struct {
	Owner, App, Name string
	Class            Class
	Trigger          string
	// Starts are its invocations' start times from the trace's start,
	// sorted; Durations their execution times.
	Starts    []time.Duration
	Durations []time.Duration
}

// Config sizes a trace.
type Config struct {
	Functions int
	Days      int
	Seed      uint64
	// FunctionsPerApp is the most functions one application holds; each
	// application gets 1 to it (uniform). 0 means 1.
	FunctionsPerApp int
}

// MaxFunctions and MaxDays bound a generated trace.
const (
	MaxFunctions = 100_000
	MaxDays      = 14
)

// maxInvocations bounds one function's invocations: 6,480 an hour at the
// diurnal peak is under 160,000 a day.
const maxInvocations = 20_000_000

// Generate makes the trace's functions.
func Generate(cfg Config) ([]Function, error) {
	if cfg.Functions < 1 || cfg.Functions > MaxFunctions {
		return nil, fmt.Errorf("functions %d: want 1 to %d", cfg.Functions, MaxFunctions)
	}
	if cfg.Days < 1 || cfg.Days > MaxDays {
		return nil, fmt.Errorf("days %d: want 1 to %d", cfg.Days, MaxDays)
	}
	perApp := max(cfg.FunctionsPerApp, 1)
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x7ace))
	classes := make([]Class, 0, cfg.Functions)
	for c, share := range shares {
		n := int(math.Round(share * float64(cfg.Functions)))
		if c == len(shares)-1 {
			n = cfg.Functions - len(classes)
		}
		for range min(n, cfg.Functions-len(classes)) {
			classes = append(classes, Class(c))
		}
	}
	rng.Shuffle(len(classes), func(i, j int) { classes[i], classes[j] = classes[j], classes[i] })
	span := time.Duration(cfg.Days) * 24 * time.Hour
	out := make([]Function, 0, cfg.Functions)
	app, left := "", 0
	for i := range cfg.Functions {
		if left == 0 {
			app, left = hash(cfg.Seed, "app", i), 1+rng.IntN(perApp)
		}
		left--
		f := Function{Owner: hash(cfg.Seed, "owner", i), App: app, Name: hash(cfg.Seed, "function", i), Class: classes[i]}
		f.Trigger = f.Class.trigger(rng)
		f.Starts = f.Class.starts(rng, span)
		if len(f.Starts) > maxInvocations {
			return nil, fmt.Errorf("function %d: %d invocations, want at most %d", i, len(f.Starts), maxInvocations)
		}
		// Half the executions are under a second (the paper's Figure 7):
		// log-normal with a median of 0.8 s.
		f.Durations = make([]time.Duration, len(f.Starts))
		for k := range f.Durations {
			f.Durations[k] = time.Duration(0.8 * math.Exp(rng.NormFloat64()) * float64(time.Second)).Round(time.Millisecond)
		}
		out = append(out, f)
	}
	return out, nil
}

func hash(seed uint64, kind string, i int) string {
	h := sha256.Sum256([]byte(fmt.Sprintf("%d/%s/%d", seed, kind, i)))
	return hex.EncodeToString(h[:])
}

func (c Class) trigger(rng *rand.Rand) string {
	switch c {
	case Timer:
		return "timer"
	case Regular:
		return [...]string{"queue", "event", "storage", "orchestration"}[rng.IntN(4)]
	case Rare:
		if rng.IntN(2) == 0 {
			return "http"
		}
		return "queue"
	default:
		return "http"
	}
}

// logUniform draws from [lo, hi] uniformly on a log scale.
func logUniform(rng *rand.Rand, lo, hi float64) float64 {
	return lo * math.Exp(rng.Float64()*math.Log(hi/lo))
}

func (c Class) starts(rng *rand.Rand, span time.Duration) []time.Duration {
	var out []time.Duration
	add := func(at time.Duration) bool {
		if at < 0 || at >= span {
			return at < span
		}
		out = append(out, at)
		return true
	}
	switch c {
	case Timer:
		periods := [...]time.Duration{1, 5, 10, 15, 30, 60, 120, 240}
		p := periods[rng.IntN(len(periods))] * time.Minute
		for at := time.Duration(rng.Int64N(int64(p))).Truncate(time.Second); at < span; at += p {
			add(at + time.Duration(rng.Int64N(int64(time.Second))))
		}
	case Regular:
		p := logUniform(rng, 2, 120) * float64(time.Minute)
		j := 0.05 + 0.25*rng.Float64()
		for at := time.Duration(rng.Float64() * p); at < span; at += time.Duration(p * (1 + j*(2*rng.Float64()-1))) {
			add(at)
		}
	case Bursty:
		mean := logUniform(rng, 1, 360) * float64(time.Minute)
		for at := time.Duration(rng.ExpFloat64() * mean); at < span; at += time.Duration(rng.ExpFloat64() * mean) {
			n, rate := 2+rng.IntN(49), 0.2+4.8*rng.Float64()
			for range n {
				at += time.Duration(rng.ExpFloat64() / rate * float64(time.Second))
				if !add(at) {
					break
				}
			}
		}
	case Diurnal:
		base := logUniform(rng, 0.5, 3_600) / float64(time.Hour) // per nanosecond
		phase := 2 * math.Pi * rng.Float64()
		peak := 1.8 * base
		// Thinning: candidates at the peak rate, each kept with λ(t)/peak.
		for at := time.Duration(rng.ExpFloat64() / peak); at < span; at += time.Duration(rng.ExpFloat64() / peak) {
			day := 2 * math.Pi * float64(at) / float64(24*time.Hour)
			if rng.Float64()*peak < base*(1+0.8*math.Sin(day+phase)) {
				add(at)
			}
		}
	case Rare:
		rate := logUniform(rng, 1, 24) / float64(24*time.Hour)
		for at := time.Duration(rng.ExpFloat64() / rate); at < span; at += time.Duration(rng.ExpFloat64() / rate) {
			add(at)
		}
	}
	slices.Sort(out)
	return out
}

// Write2019 writes day d (from 0) in the Azure Functions 2019 format
// (invocations_per_function_md.anon.dNN.csv): a row per function with its
// invocations in each minute of the day.
func Write2019(w io.Writer, fns []Function, d int) error {
	bw := bufio.NewWriterSize(w, 1<<16)
	put := func(s string) { _, _ = bw.WriteString(s) } // Flush returns the first error
	put("HashOwner,HashApp,HashFunction,Trigger")
	for m := 1; m <= 1440; m++ {
		put("," + strconv.Itoa(m))
	}
	put("\n")
	from, to := time.Duration(d)*24*time.Hour, time.Duration(d+1)*24*time.Hour
	counts := make([]int64, 1440)
	for i := range fns {
		f := &fns[i]
		clear(counts)
		lo, _ := slices.BinarySearch(f.Starts, from)
		for _, at := range f.Starts[lo:] {
			if at >= to {
				break
			}
			counts[(at-from)/time.Minute]++
		}
		put(f.Owner + "," + f.App + "," + f.Name + "," + f.Trigger)
		for _, c := range counts {
			put("," + strconv.FormatInt(c, 10))
		}
		put("\n")
	}
	return bw.Flush()
}

// Write2021 writes the Azure Functions 2021 format: a header
// app,func,end_timestamp,duration and one row per invocation, in order of
// end time, times in seconds from the trace's start.
func Write2021(w io.Writer, fns []Function) error {
	type inv struct {
		end, dur time.Duration
		fn       int
	}
	var all []inv
	for i := range fns {
		for k, at := range fns[i].Starts {
			all = append(all, inv{end: at + fns[i].Durations[k], dur: fns[i].Durations[k], fn: i})
		}
	}
	slices.SortFunc(all, func(a, b inv) int {
		if a.end != b.end {
			return int(a.end - b.end)
		}
		return a.fn - b.fn
	})
	bw := bufio.NewWriterSize(w, 1<<16)
	put := func(s string) { _, _ = bw.WriteString(s) } // Flush returns the first error
	put("app,func,end_timestamp,duration\n")
	for _, v := range all {
		f := &fns[v.fn]
		put(f.App + "," + f.Name + "," + strconv.FormatFloat(v.end.Seconds(), 'f', 3, 64) + "," + strconv.FormatFloat(v.dur.Seconds(), 'f', 3, 64) + "\n")
	}
	return bw.Flush()
}

// Summary describes a generated trace.
type Summary struct {
	Functions, Apps int
	// Classes counts the functions of each class.
	Classes     [5]int
	Invocations int
	// HourlyOrLess and MinutelyOrLess are the shares of functions invoked
	// once an hour or less, and once a minute or less, on average.
	HourlyOrLess, MinutelyOrLess float64
}

// Summarize measures fns over days.
func Summarize(fns []Function, days int) Summary {
	s := Summary{Functions: len(fns)}
	apps := map[string]bool{}
	hours := float64(days) * 24
	for i := range fns {
		f := &fns[i]
		apps[f.App] = true
		s.Classes[f.Class]++
		s.Invocations += len(f.Starts)
		perHour := float64(len(f.Starts)) / hours
		if perHour <= 1 {
			s.HourlyOrLess++
		}
		if perHour <= 60 {
			s.MinutelyOrLess++
		}
	}
	s.Apps = len(apps)
	if n := float64(len(fns)); n > 0 {
		s.HourlyOrLess /= n
		s.MinutelyOrLess /= n
	}
	return s
}
