package overlay

import "testing"

func TestOverlay(t *testing.T) {
	o := New[string, int]()
	o.Put("a", "10", 1)
	tests := []struct {
		name     string
		cachedRV string
		want     int
		wantOK   bool
		wantLen  int
	}{
		{"cache behind the write", "9", 1, true, 1},
		{"cache at the write", "10", 0, false, 0},
		{"after catching up the write is gone", "9", 0, false, 0},
	}
	for _, tt := range tests {
		got, ok := o.Newer("a", tt.cachedRV)
		if got != tt.want || ok != tt.wantOK || o.Len() != tt.wantLen {
			t.Errorf("%s: Newer = %d, %v (len %d); want %d, %v (len %d)", tt.name, got, ok, o.Len(), tt.want, tt.wantOK, tt.wantLen)
		}
	}

	o.Put("b", "20", 2)
	o.Put("b", "15", 3) // an older write landing late never replaces a newer one
	if got, ok := o.Newer("b", "19"); !ok || got != 2 {
		t.Errorf("Newer(b, 19) = %d, %v; want 2, true", got, ok)
	}
	if !o.Own("b", "20") || o.Own("b", "19") || o.Own("c", "20") {
		t.Error("Own: want true only for the last write's resourceVersion")
	}
	o.Put("b", "x", 4) // not a number: forget, fall back to the cache
	if _, ok := o.Newer("b", "1"); ok || o.Len() != 0 {
		t.Errorf("after an unparsable resourceVersion: Newer ok = %v, len %d; want false, 0", ok, o.Len())
	}
	o.Put("c", "5", 5)
	if _, ok := o.Newer("c", "not-a-number"); ok {
		t.Error("Newer with an unparsable cached resourceVersion: want the cache")
	}
}
