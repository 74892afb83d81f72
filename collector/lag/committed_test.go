package lag

import (
	"errors"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// TestAuthErr: the codes that fail a whole group or shard are kadm's
// authorization failures, wrapped as kadm wraps them; others are not.
func TestAuthErr(t *testing.T) {
	cases := []struct {
		code int16
		auth bool
	}{
		{0, false},
		{kerr.GroupAuthorizationFailed.Code, true},
		{kerr.TopicAuthorizationFailed.Code, true},
		{kerr.ClusterAuthorizationFailed.Code, true},
		{kerr.GroupIDNotFound.Code, false},
		{kerr.CoordinatorNotAvailable.Code, false},
	}
	for _, c := range cases {
		err := authErr(c.code)
		var ae *kadm.AuthError
		if got := errors.As(err, &ae); got != c.auth {
			t.Errorf("authErr(%d) = %v; an authorization error: %v, want %v", c.code, err, got, c.auth)
		}
		if c.auth && !errors.Is(err, kerr.ErrorForCode(c.code)) {
			t.Errorf("authErr(%d) = %v does not wrap %v", c.code, err, kerr.ErrorForCode(c.code))
		}
	}
}

// TestGroupCommitsAt: a partition's committed offset is found by topic and
// id; an error code, a negative offset or another topic's partition is none.
func TestGroupCommitsAt(t *testing.T) {
	g := groupCommits{parts: []committed{
		{topic: "a", partition: 0, at: 5}, {topic: "a", partition: 2, at: -1}, {topic: "a", partition: 3, code: kerr.UnknownTopicOrPartition.Code, at: 9},
		{topic: "b", partition: 1, at: 7},
	}}
	cases := []struct {
		topic string
		id    int32
		at    int64
		ok    bool
	}{
		{"a", 0, 5, true}, {"a", 1, 0, false}, {"a", 2, 0, false}, {"a", 3, 0, false}, {"b", 1, 7, true}, {"b", 0, 0, false}, {"c", 0, 0, false},
	}
	for _, c := range cases {
		if at, ok := g.at(c.topic, c.id); at != c.at || ok != c.ok {
			t.Errorf("at(%q, %d) = %d, %v; want %d, %v", c.topic, c.id, at, ok, c.at, c.ok)
		}
	}
	if got := g.topics(); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("topics() = %v, want [a b]", got)
	}
}
