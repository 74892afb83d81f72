package lag

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

// TestMaxVersions: the version key takes what KEDA's kafka trigger takes
// (sarama's grammar) and caps franz-go at the newest release it knows that
// is not newer; what KEDA refuses is refused, naming the key.
func TestMaxVersions(t *testing.T) {
	tests := []struct {
		in      string
		want    *kversion.Versions // nil: an error
		wantErr string
	}{
		{in: "2.8.0", want: kversion.V2_8_0()},
		{in: "2.8.1", want: kversion.V2_8_0()},
		{in: "1.0.0", want: kversion.V1_0_0()},
		{in: "3.9.0", want: kversion.V3_9_0()},
		{in: "4.0.0", want: kversion.V4_0_0()},
		// Releases franz-go does not name: the newest before them.
		{in: "2.9.0", want: kversion.V2_8_0()},
		{in: "1.5.0", want: kversion.V1_1_0()},
		{in: "99.0.0", want: kversion.FromString(kversion.VersionStrings()[0])},
		// Before 1.0, four parts.
		{in: "0.11.0.2", want: kversion.V0_11_0()},
		{in: "0.10.2.1", want: kversion.V0_10_2()},
		{in: "0.8.2.0", want: kversion.V0_8_2()},
		{in: "0.7.0.0", wantErr: "from 0.8.0 on"},
		// What sarama's ParseKafkaVersion refuses.
		{in: "2.8", wantErr: "MAJOR.MINOR.PATCH"},
		{in: "v2.8.0", wantErr: "MAJOR.MINOR.PATCH"},
		{in: "0.10.2", wantErr: "MAJOR.MINOR.PATCH"},
		{in: "2.8.0.0", wantErr: "MAJOR.MINOR.PATCH"},
		{in: "latest", wantErr: "MAJOR.MINOR.PATCH"},
		{in: "", wantErr: "MAJOR.MINOR.PATCH"},
		{in: "2.8.99999999999", wantErr: "MAJOR.MINOR.PATCH"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := MaxVersions(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.HasPrefix(err.Error(), "key version: ") {
					t.Fatalf("MaxVersions(%q) = %v, %v; want an error on key version containing %q", tt.in, got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("MaxVersions(%q): %v", tt.in, err)
			}
			if !got.Equal(tt.want) {
				t.Errorf("MaxVersions(%q) = %s, want %s", tt.in, got.VersionGuess(), tt.want.VersionGuess())
			}
		})
	}
}

// TestFetchHonoursVersion: with version 2.8.0 every request franz-go sends
// kfake is at most 2.8's version of it, and the lag is read; without it,
// some request goes above (kfake speaks newer versions), so the cap is
// what holds them down.
func TestFetchHonoursVersion(t *testing.T) {
	capped := kversion.V2_8_0()
	for _, tt := range []struct {
		version   string
		wantAbove bool
	}{{"2.8.0", false}, {"", true}} {
		t.Run("version="+tt.version, func(t *testing.T) {
			c := kfake.MustCluster(kfake.NumBrokers(1))
			defer c.Close()
			seed(t, c, "input", "fn", []int64{5, 3}, []int64{2, -1})
			var (
				mu    sync.Mutex
				above []string
			)
			c.Control(func(req kmsg.Request) (kmsg.Response, error, bool) {
				c.KeepControl()
				if max, ok := capped.LookupMaxKeyVersion(req.Key()); ok && req.GetVersion() > max {
					mu.Lock()
					above = append(above, kmsg.NameForKey(req.Key()))
					mu.Unlock()
				}
				return nil, nil, false
			})
			rec := newRecorder()
			f, _ := newFetcher(t, rec)
			tg := lagTarget("fn", c, "input", "fn")
			tg.Cluster.Auth.MaxVersion = tt.version
			f.Set(tg)
			f.FetchNow(context.Background())
			s, errMsg := rec.last("ns/fn")
			if errMsg != "" || s == nil || len(s.GetPartitionLags()) != 2 || s.GetPartitionLags()[0].GetCommittedOffset() != 2 {
				t.Fatalf("sample %v, error %q; want partitions 0 (committed 2) and 1", s, errMsg)
			}
			mu.Lock()
			defer mu.Unlock()
			if got := len(above) > 0; got != tt.wantAbove {
				t.Errorf("requests above 2.8's versions: %v; want some: %v", above, tt.wantAbove)
			}
		})
	}
}
