package commonv1

// Pagination of the List RPCs (AIP-158): a page size with a default and a
// ceiling, and an opaque token that carries the sort key of the last item
// returned, so the next page starts right after it whatever was added or
// removed meanwhile.

import (
	"encoding/base64"
	"fmt"
)

const (
	// DefaultPageSize is the page size of a request that asks for none.
	DefaultPageSize = 500
	// MaxPageSize is the largest page returned; a request for more is
	// served this many, as AIP-158 asks, rather than refused.
	MaxPageSize = 1000
	// MaxPageToken bounds a page token's length.
	MaxPageToken = 1024
)

// PageSize is the number of items to return for a requested page size
// that passed ValidatePage: DefaultPageSize for 0, at most MaxPageSize.
func PageSize(requested int32) int {
	switch {
	case requested <= 0:
		return DefaultPageSize
	case requested > MaxPageSize:
		return MaxPageSize
	}
	return int(requested)
}

// ValidatePage checks a request's page_size and page_token fields.
func ValidatePage(size int32, token string) error {
	if size < 0 {
		return Invalid("page_size", size, fmt.Sprintf("at least 0 (0 means %d; at most %d are returned)", DefaultPageSize, MaxPageSize))
	}
	if _, err := PageCursor(token); err != nil {
		return err
	}
	return nil
}

// PageToken is the opaque token of a page that ends at cursor (the sort key
// of its last item).
func PageToken(cursor string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(cursor))
}

// PageCursor reads a page token back; "" is the first page.
func PageCursor(token string) (string, error) {
	const want = "empty or the next_page_token of an earlier response"
	if len(token) > MaxPageToken {
		return "", Invalid("page_token", token, fmt.Sprintf("%s (at most %d bytes)", want, MaxPageToken))
	}
	b, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil || (token != "" && len(b) == 0) {
		return "", Invalid("page_token", token, want)
	}
	return string(b), nil
}
