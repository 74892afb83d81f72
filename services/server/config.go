package server

import (
	"flag"
	"fmt"
	"math"
	"net"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// Config is the listening and shutdown configuration every tidal binary shares.
type Config struct {
	// GRPCAddr is where the gRPC API listens, host:port.
	GRPCAddr string
	// HTTPAddr is where /metrics, /healthz and /readyz listen, host:port.
	HTTPAddr string
	// ShutdownGrace bounds how long in-flight calls may run after SIGTERM
	// before the server stops them.
	ShutdownGrace time.Duration
	// LogLevel is the zap level: debug, info, warn or error.
	LogLevel string
	// TLS is the optional mutual TLS for the gRPC port and for calls to
	// other tidal services.
	TLS TLSConfig
	// Authz is who may call what, once TLS gives callers an identity.
	Authz AuthzConfig
	// MaxConcurrentStreams bounds the calls one client connection may have
	// open at once; 0 means gRPC's default (no bound).
	MaxConcurrentStreams uint
	// Conn bounds connections to both ports.
	Conn ConnConfig
	// AdvertiseAddr is the gRPC address other replicas reach this one at
	// (named in bucket Leases); empty means Advertise's default.
	AdvertiseAddr string
	// Pprof serves Go's profiler at /debug/pprof/ on the HTTP port. Off by
	// default: a profile costs CPU, and the port is reachable from the pod
	// network without authentication.
	Pprof bool
}

// Advertise is the gRPC address other replicas reach this one at:
// --advertise-addr, else $POD_IP with the --grpc-addr port, else --grpc-addr.
func (c *Config) Advertise() string {
	if c.AdvertiseAddr != "" {
		return c.AdvertiseAddr
	}
	if ip := os.Getenv("POD_IP"); ip != "" {
		if _, port, err := net.SplitHostPort(c.GRPCAddr); err == nil {
			return net.JoinHostPort(ip, port)
		}
	}
	return c.GRPCAddr
}

// RegisterFlags registers the shared flags on fs with the binary's default ports.
func (c *Config) RegisterFlags(fs *flag.FlagSet, defaultGRPC, defaultHTTP string) {
	fs.StringVar(&c.GRPCAddr, "grpc-addr", defaultGRPC, "Address the gRPC API listens on, host:port.")
	fs.StringVar(&c.HTTPAddr, "http-addr", defaultHTTP, "Address /metrics, /healthz and /readyz listen on, host:port.")
	fs.DurationVar(&c.ShutdownGrace, "shutdown-grace", 10*time.Second, "How long in-flight calls may run after SIGTERM; 0 stops them at once.")
	fs.BoolVar(&c.Pprof, "pprof", false, "Serve Go's profiler at /debug/pprof/ on --http-addr (unauthenticated: for measuring, not for production).")
	fs.StringVar(&c.LogLevel, "log-level", "info", "Log level: debug, info, warn or error.")
	fs.StringVar(&c.AdvertiseAddr, "advertise-addr", "", "gRPC address other replicas reach this one at, named in bucket Leases; empty means $POD_IP with the --grpc-addr port, else --grpc-addr.")
	fs.UintVar(&c.MaxConcurrentStreams, "max-concurrent-streams", defaultMaxConcurrentStreams, "Calls one client connection may have open at once (HTTP/2 streams); more wait in the client. At least the decider's --scale-workers.")
	c.Conn.RegisterFlags(fs)
	c.TLS.RegisterFlags(fs)
	c.Authz.RegisterFlags(fs)
}

// ConnConfig bounds the connections a server holds and how long it keeps
// them: every caller's connection costs memory and a goroutine or two, and
// mutual TLS says who a caller is only after the handshake, so these bounds
// apply to everyone alike.
type ConnConfig struct {
	// MaxConnections bounds the gRPC connections open at once; one more
	// waits unaccepted until one closes. HTTPMaxConnections bounds the HTTP
	// port's. 0 means no bound.
	MaxConnections, HTTPMaxConnections int
	// HandshakeTimeout bounds a new gRPC connection's TLS and HTTP/2
	// handshakes.
	HandshakeTimeout time.Duration
	// MaxIdle closes a gRPC connection without a call for this long.
	MaxIdle time.Duration
	// KeepaliveTime is how long a connection may be silent before the
	// server pings it; KeepaliveTimeout how long the ping may go
	// unanswered before the connection is closed.
	KeepaliveTime, KeepaliveTimeout time.Duration
	// MinPingInterval is the most often a client may ping; one pinging more
	// often is disconnected.
	MinPingInterval time.Duration
}

// RegisterFlags registers the connection flags on fs.
func (c *ConnConfig) RegisterFlags(fs *flag.FlagSet) {
	// KEDA holds a connection per scaler address and trigger; thousands of
	// ScaledObjects fit.
	fs.IntVar(&c.MaxConnections, "max-connections", 4096, "gRPC connections this server holds at once; one more waits unaccepted until one closes. 0 means no bound.")
	fs.IntVar(&c.HTTPMaxConnections, "http-max-connections", 256, "Connections to --http-addr (metrics, probes) held at once; one more waits. 0 means no bound.")
	fs.DurationVar(&c.HandshakeTimeout, "handshake-timeout", 10*time.Second, "Longest TLS and HTTP/2 handshake of a new gRPC connection.")
	fs.DurationVar(&c.MaxIdle, "max-connection-idle", 5*time.Minute, "A gRPC connection without a call for this long is closed (the client reconnects when it next calls).")
	fs.DurationVar(&c.KeepaliveTime, "keepalive-time", 2*time.Minute, "A gRPC connection silent this long is pinged, so a peer gone without a word is noticed.")
	fs.DurationVar(&c.KeepaliveTimeout, "keepalive-timeout", 20*time.Second, "How long the server waits for a ping's answer before it closes the connection.")
	fs.DurationVar(&c.MinPingInterval, "keepalive-min-ping-interval", 30*time.Second, "Most often a client may ping, with or without calls; a client pinging more often is disconnected.")
}

// Validate refuses negative bounds. A zero duration keeps gRPC's default
// (a Config built by hand); the flags' defaults are never zero.
func (c *ConnConfig) Validate() error {
	for _, f := range []struct {
		flag string
		v    int64
	}{
		{"max-connections", int64(c.MaxConnections)}, {"http-max-connections", int64(c.HTTPMaxConnections)},
		{"handshake-timeout", int64(c.HandshakeTimeout)}, {"max-connection-idle", int64(c.MaxIdle)},
		{"keepalive-time", int64(c.KeepaliveTime)}, {"keepalive-timeout", int64(c.KeepaliveTimeout)},
		{"keepalive-min-ping-interval", int64(c.MinPingInterval)},
	} {
		if f.v < 0 {
			return fmt.Errorf("--%s: want at least 0, have a negative value", f.flag)
		}
	}
	return nil
}

// defaultMaxConcurrentStreams lets a decider's largest --scale-workers
// (1,024) through on its one connection.
const defaultMaxConcurrentStreams = 1024

// Validate refuses a configuration the server cannot run with.
func (c *Config) Validate() error {
	for _, a := range []struct{ flag, addr string }{{"grpc-addr", c.GRPCAddr}, {"http-addr", c.HTTPAddr}} {
		if _, _, err := net.SplitHostPort(a.addr); err != nil {
			return fmt.Errorf("--%s %q: want host:port: %w", a.flag, a.addr, err)
		}
	}
	if c.ShutdownGrace < 0 {
		return fmt.Errorf("--shutdown-grace %s: must be at least 0", c.ShutdownGrace)
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		return fmt.Errorf("--log-level %q: want debug, info, warn or error", c.LogLevel)
	}
	if c.MaxConcurrentStreams > math.MaxUint32 {
		return fmt.Errorf("--max-concurrent-streams %d: want at most %d", c.MaxConcurrentStreams, uint32(math.MaxUint32))
	}
	if err := c.Conn.Validate(); err != nil {
		return err
	}
	if err := c.TLS.Validate(); err != nil {
		return err
	}
	return c.Authz.Validate()
}

// DialOption returns the transport credentials for calling another tidal
// service of role: with mutual TLS, this service presents its certificate
// and requires the server's to name an identity of role (so a collector's
// certificate cannot pose as an actuator); plaintext otherwise.
func (c *Config) DialOption(role Role) (grpc.DialOption, error) {
	if !c.TLS.Enabled() {
		return grpc.WithTransportCredentials(insecure.NewCredentials()), nil
	}
	p := c.Authz.policy
	if p == nil {
		var err error
		if p, err = c.Authz.build(); err != nil {
			return nil, err
		}
	}
	tc, err := c.TLS.peerTLS(p.ids(role), role)
	if err != nil {
		return nil, err
	}
	return grpc.WithTransportCredentials(credentials.NewTLS(tc)), nil
}

// EnvName is the environment variable that stands in for flag name:
// TIDAL_ and the name in upper case with '-' as '_'.
func EnvName(name string) string {
	return "TIDAL_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// ParseFlags parses args into fs, then sets every flag not given on the
// command line from its environment variable (EnvName), so a Deployment can
// configure a binary without args. A malformed value names the variable and
// the value; it is never replaced by the default.
func ParseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil || given[f.Name] {
			return
		}
		v, ok := os.LookupEnv(EnvName(f.Name))
		if !ok {
			return
		}
		if serr := fs.Set(f.Name, v); serr != nil {
			err = fmt.Errorf("%s=%q: %w", EnvName(f.Name), v, serr)
		}
	})
	return err
}
