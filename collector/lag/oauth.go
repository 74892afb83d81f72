package lag

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"
)

// tokenTimeout bounds one request to an OAuth token endpoint.
const tokenTimeout = 10 * time.Second

// oauthMechanism is OAUTHBEARER with tokens of the OAuth 2 client
// credentials flow (KEDA's saslTokenProvider bearer): a token from
// a.TokenURL for client a.User (secret a.Password) and a.Scopes, reused
// until it expires, sent with a.Extensions. With allow set, the token
// endpoint's address must pass it as a broker's does: whoever names the
// endpoint names where the collector connects.
func oauthMechanism(a Auth, allow func(addr string) bool) sasl.Mechanism {
	d := &net.Dialer{Timeout: dialTimeout}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if allow != nil && !allow(addr) {
			return nil, fmt.Errorf("oauth token endpoint %s: %w", addr, ErrBrokerNotAllowed)
		}
		return d.DialContext(ctx, network, addr)
	}
	cfg := clientcredentials.Config{ClientID: a.User, ClientSecret: a.Password, TokenURL: a.TokenURL, Scopes: a.Scopes}
	ctx := context.WithValue(context.Background(), oauth2.HTTPClient, &http.Client{Transport: tr, Timeout: tokenTimeout})
	ts := cfg.TokenSource(ctx) // caches the token until it expires
	return oauth.Oauth(func(context.Context) (oauth.Auth, error) {
		tok, err := ts.Token()
		if err != nil {
			// oauth2's error may quote the endpoint's answer, never the
			// client's secret.
			return oauth.Auth{}, fmt.Errorf("oauth token from %s: %w", a.TokenURL, err)
		}
		return oauth.Auth{Token: tok.AccessToken, Extensions: a.Extensions}, nil
	})
}
