package server

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"regexp"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/tidalscale/tidal/identity"
	"github.com/tidalscale/tidal/keyval"
	"github.com/tidalscale/tidal/proto/externalscaler"
	actuatorv1 "github.com/tidalscale/tidal/proto/tidal/actuator/v1"
	collectorv1 "github.com/tidalscale/tidal/proto/tidal/collector/v1"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	deciderv1 "github.com/tidalscale/tidal/proto/tidal/decider/v1"
)

// Role is a kind of caller. A Role value may hold several roles.
type Role uint8

// The kinds of caller the built-in policy knows.
const (
	RoleCollector Role = 1 << iota
	RoleDecider
	RoleActuator
	// RolePusher pushes stats to collectors (activators, queue proxies).
	RolePusher
	// RoleOperator is a person or tool allowed to scale and deploy by hand.
	RoleOperator
	// RoleKEDA is KEDA calling the collector's external scaler (the client
	// certificate of its TriggerAuthentication).
	RoleKEDA
	// RoleDeployer deploys, updates and undeploys Functions (riff's function
	// deployer calls); it may not scale.
	RoleDeployer
	// RoleReader reads every namespace's targets and decisions; an
	// identity without any role reads only its bound namespaces.
	RoleReader
)

// serviceRoles are tidal's own services: their reads are driven by calls
// already budgeted (KEDA's, the deciders' ticks), so they have no read
// budget of their own.
const serviceRoles = RoleCollector | RoleDecider | RoleActuator

// roleNames are the roles in label order: a caller holding several is
// counted under the first.
var roleNames = []struct {
	role Role
	name string
}{
	{RoleCollector, "collector"}, {RoleDecider, "decider"}, {RoleActuator, "actuator"},
	{RolePusher, "pusher"}, {RoleOperator, "operator"}, {RoleKEDA, "keda"},
	{RoleDeployer, "deployer"}, {RoleReader, "reader"},
}

// Labels a refusal is counted under besides the roles: an identity that
// holds no role, and a caller without a usable identity.
const (
	labelOther   = "other"
	labelUnknown = "unknown"
)

// String names the roles in r, joined by '+'; "other" when none.
func (r Role) String() string {
	var names []string
	for _, rn := range roleNames {
		if r&rn.role != 0 {
			names = append(names, rn.name)
		}
	}
	if len(names) == 0 {
		return labelOther
	}
	return strings.Join(names, "+")
}

// label is the one bounded metric label of r.
func (r Role) label() string {
	for _, rn := range roleNames {
		if r&rn.role != 0 {
			return rn.name
		}
	}
	return labelOther
}

// mutating lists the methods that change something, and the roles that may
// call each. Every other method of tidal's services is a read (its name
// starts with Get, List, Watch or Explain) or is refused; see classify.
var mutating = map[string]Role{
	// Actuators forward Scale to the replica that owns the target.
	actuatorv1.ActuatorService_Scale_FullMethodName: RoleDecider | RoleActuator | RoleOperator,
	// Functions are deployed by whoever owns them; deciders only scale,
	// and a decider parses what tenants write, so it is the likeliest to
	// be taken over.
	actuatorv1.ActuatorService_Deploy_FullMethodName:            RoleDeployer | RoleOperator,
	actuatorv1.ActuatorService_Undeploy_FullMethodName:          RoleDeployer | RoleOperator,
	actuatorv1.ActuatorService_Update_FullMethodName:            RoleDeployer | RoleOperator,
	deciderv1.DeciderService_Ingest_FullMethodName:              RoleCollector,
	collectorv1.CollectorService_PushStats_FullMethodName:       RolePusher,
	collectorv1.CollectorService_PushStatsStream_FullMethodName: RolePusher,
	// Collectors hand a KEDA inline Kafka trigger to the replica owning
	// its bucket.
	collectorv1.KEDATargetService_EnsureKEDATarget_FullMethodName: RoleCollector,
	// Collectors hand activator stats to the replica owning their target.
	collectorv1.ActivatorStatService_ForwardActivatorStats_FullMethodName: RoleCollector,
}

// roleOnly lists methods that change nothing but only some roles may
// call, as if they did: KEDA's external scaler on the collector, for KEDA
// (and operators, to try a trigger by hand). Like mutating methods they
// count against the caller's rate.
var roleOnly = map[string]Role{
	externalscaler.ExternalScaler_IsActive_FullMethodName:         RoleKEDA | RoleOperator,
	externalscaler.ExternalScaler_StreamIsActive_FullMethodName:   RoleKEDA | RoleOperator,
	externalscaler.ExternalScaler_GetMetricSpec_FullMethodName:    RoleKEDA | RoleOperator,
	externalscaler.ExternalScaler_GetMetrics_FullMethodName:       RoleKEDA | RoleOperator,
	externalscaler.ExternalScaler_StreamMetricSpec_FullMethodName: RoleKEDA | RoleOperator,
}

// readServices are the services every method of which only reads: health
// and server reflection, which grpcurl users need.
var readServices = []string{"/grpc.health.v1.Health/", "/grpc.reflection.v1.ServerReflection/", "/grpc.reflection.v1alpha.ServerReflection/"}

// readPrefixes start the names of the methods of tidal's services that only
// read.
var readPrefixes = []string{"Get", "List", "Watch", "Explain"}

// methodClass is what a method does, for the policy.
type methodClass int

const (
	classUnknown methodClass = iota
	classRead
	classMutating
)

// classify tells reads from mutating methods. A method of tidal's services
// that is neither listed in mutating nor named as a read is unknown, and
// refused unless an --authz-allow rule names it: a new mutating RPC stays
// closed until the policy learns of it.
func classify(method string) (methodClass, Role) {
	if roles, ok := mutating[method]; ok {
		return classMutating, roles
	}
	if roles, ok := roleOnly[method]; ok {
		return classMutating, roles
	}
	if slices.ContainsFunc(readServices, func(svc string) bool { return strings.HasPrefix(method, svc) }) {
		return classRead, 0
	}
	if _, name, ok := strings.Cut(strings.TrimPrefix(method, "/"), "/"); ok && strings.HasPrefix(method, "/tidal.") &&
		slices.ContainsFunc(readPrefixes, func(p string) bool { return strings.HasPrefix(name, p) }) {
		return classRead, 0
	}
	return classUnknown, 0
}

// AuthzConfig is who may call what once mutual TLS is on. Identities are
// SPIFFE IDs. The built-in policy: Scale only deciders, operators (and
// actuators, which forward it to each other); Deploy, Undeploy and Update
// only deployers and operators; Ingest, EnsureKEDATarget (a KEDA trigger
// forwarded to its collector) and ForwardActivatorStats (activator stats
// forwarded to their collector) only collectors; PushStats and
// PushStatsStream only pushers; the ExternalScaler methods only KEDA and
// operators; reads (Get*, List*, Watch*, Explain, health, reflection) any
// identity of the trust domain, within its namespaces (see Namespaces).
// With plaintext no caller has an identity and nothing is checked.
type AuthzConfig struct {
	// TrustDomain, Namespace and AccountPrefix make the default identities
	// of tidal's services: spiffe://TrustDomain/ns/Namespace/sa/AccountPrefix-collector,
	// and so on, the chart's ServiceAccounts.
	TrustDomain   string
	Namespace     string
	AccountPrefix string
	// Collectors, Deciders, Actuators, Pushers, Operators, KEDA, Deployers
	// and Readers are the identities holding each role; empty Collectors,
	// Deciders or Actuators mean the default one.
	Collectors, Deciders, Actuators, Pushers, Operators, KEDA, Deployers, Readers idList
	// Namespaces binds identities to namespaces: every target, namespace
	// and object a bound identity's request names must be in its
	// namespaces. An identity that holds no role and is bound nowhere is
	// bound to the namespace of its ServiceAccount ID
	// (/ns/NAMESPACE/sa/NAME), or to none.
	Namespaces bindingList
	// Allow are extra rules, METHOD_PREFIX=ID,ID...: identities allowed
	// every method starting with the prefix.
	Allow allowList
	// File is a YAML or JSON file of more identities and rules (authzFile).
	File string
	// MutatingRate and MutatingBurst bound each identity's calls of
	// non-read methods (a stream counts once, when opened); 0 turns the
	// bound off.
	MutatingRate  float64
	MutatingBurst int
	// ReadRate and ReadBurst bound each identity's reads, the same way;
	// tidal's own services are not bound (their reads follow from calls
	// that are). 0 turns the bound off.
	ReadRate  float64
	ReadBurst int
	// NamespaceReadRate and NamespaceReadBurst bound each identity's reads
	// about one namespace (the one the request names; "" when it names
	// none), spent before ReadRate's: one tenant's flood through an
	// identity several tenants share (a dashboard, a binding to several
	// namespaces) is refused before it takes the reads the others need.
	// 0 turns the bound off.
	NamespaceReadRate  float64
	NamespaceReadBurst int
	// NamespaceWatchesPerCaller bounds the watch streams (WatchDecisions)
	// one identity holds open about one namespace, NamespaceWatches those
	// of every identity but tidal's own services about one namespace: a
	// tenant's many ServiceAccounts cannot take the decider's every watch
	// slot. 0 turns a bound off.
	NamespaceWatchesPerCaller int
	NamespaceWatches          int
	// NamespaceMutatingRate and NamespaceMutatingBurst bound each
	// identity's calls of methods that are not reads about one namespace,
	// spent before MutatingRate's, tidal's own services excepted: KEDA's one
	// identity calls the external scaler for every tenant's ScaledObjects,
	// and one tenant's thousands of ScaledObjects must not spend the rate
	// every other tenant's need. 0 turns the bound off.
	NamespaceMutatingRate  float64
	NamespaceMutatingBurst int

	// policy is built by Validate.
	policy *policy
}

// idList is a comma-separated flag of SPIFFE IDs.
type idList []identity.ID

func (l *idList) String() string { return joinText((*[]identity.ID)(l), ",", identity.ID.String) }

// joinText is a list flag's value: each element as text, joined by sep.
func joinText[T any](l *[]T, sep string, text func(T) string) string {
	if l == nil {
		return ""
	}
	s := make([]string, len(*l))
	for i, v := range *l {
		s[i] = text(v)
	}
	return strings.Join(s, sep)
}

func (l *idList) Set(v string) error {
	ids, err := parseIDs(v)
	if err != nil {
		return err
	}
	*l = ids
	return nil
}

func parseIDs(v string) ([]identity.ID, error) {
	var ids []identity.ID
	for _, s := range keyval.List(v) {
		id, err := identity.Parse(s)
		if err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// binding restricts an identity to namespaces.
type binding struct {
	id         identity.ID
	namespaces []string
}

// bindingList is the repeatable --authz-namespaces flag:
// SPIFFE_ID=NAMESPACE,NAMESPACE..., several separated by ';'.
type bindingList []binding

func (l *bindingList) String() string {
	return joinText((*[]binding)(l), ";", func(b binding) string { return b.id.String() + "=" + strings.Join(b.namespaces, ",") })
}

func (l *bindingList) Set(v string) error {
	return setRules((*[]binding)(l), v, "binding", "SPIFFE_ID=NAMESPACE[,NAMESPACE]", newBinding)
}

// setRules appends to l the rules of v, separated by ';', each
// KEY=VALUE,VALUE... as parse reads it; what names a rule in an error.
func setRules[T any](l *[]T, v, what, want string, parse func(key string, values []string) (T, error)) error {
	for _, part := range strings.Split(v, ";") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		key, values, ok := strings.Cut(part, "=")
		if !ok {
			return fmt.Errorf("%s %s: want %s", what, identity.Quote(part), want)
		}
		r, err := parse(key, strings.Split(values, ","))
		if err != nil {
			return err
		}
		*l = append(*l, r)
	}
	return nil
}

// maxBoundNamespaces bounds one identity's namespaces: a tenant has a few.
const maxBoundNamespaces = 1024

func newBinding(idText string, namespaces []string) (binding, error) {
	id, err := identity.Parse(strings.TrimSpace(idText))
	if err != nil {
		return binding{}, err
	}
	b := binding{id: id}
	for _, ns := range namespaces {
		if ns = strings.TrimSpace(ns); ns == "" {
			continue
		}
		if !commonv1.IsLabel(ns) || ns == "" {
			return binding{}, fmt.Errorf("binding of %s: namespace %s: want a Kubernetes namespace name (a-z, 0-9, '-', at most 63 bytes)", identity.Quote(id.String()), identity.Quote(ns))
		}
		if !slices.Contains(b.namespaces, ns) {
			b.namespaces = append(b.namespaces, ns)
		}
	}
	if len(b.namespaces) == 0 {
		return binding{}, fmt.Errorf("binding of %s: no namespace", identity.Quote(id.String()))
	}
	if len(b.namespaces) > maxBoundNamespaces {
		return binding{}, fmt.Errorf("binding of %s: %d namespaces; want at most %d", identity.Quote(id.String()), len(b.namespaces), maxBoundNamespaces)
	}
	return b, nil
}

// allowRule lets identities call every method starting with prefix.
type allowRule struct {
	prefix string
	ids    []identity.ID
}

// allowList is the repeatable --authz-allow flag; one value may hold several
// rules separated by ';', so one environment variable can carry them all.
type allowList []allowRule

func (l *allowList) String() string {
	return joinText((*[]allowRule)(l), ";", func(r allowRule) string { return r.prefix + "=" + (*idList)(&r.ids).String() })
}

func (l *allowList) Set(v string) error {
	return setRules((*[]allowRule)(l), v, "rule", "METHOD_PREFIX=SPIFFE_ID[,SPIFFE_ID]", newAllowRule)
}

func newAllowRule(prefix string, ids []string) (allowRule, error) {
	prefix = strings.TrimSpace(prefix)
	if prefix == "" {
		return allowRule{}, errors.New("rule: empty method prefix")
	}
	if !strings.HasPrefix(prefix, "/") {
		prefix = "/" + prefix
	}
	r := allowRule{prefix: prefix}
	for _, s := range ids {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		id, err := identity.Parse(s)
		if err != nil {
			return allowRule{}, fmt.Errorf("rule for %s: %w", identity.Quote(prefix), err)
		}
		r.ids = append(r.ids, id)
	}
	if len(r.ids) == 0 {
		return allowRule{}, fmt.Errorf("rule for %s: no identity", identity.Quote(prefix))
	}
	return r, nil
}

// authzFile is --authz-file: identities added to each role, and rules.
type authzFile struct {
	Collectors []string `json:"collectors,omitempty"`
	Deciders   []string `json:"deciders,omitempty"`
	Actuators  []string `json:"actuators,omitempty"`
	Pushers    []string `json:"pushers,omitempty"`
	Operators  []string `json:"operators,omitempty"`
	KEDA       []string `json:"keda,omitempty"`
	Deployers  []string `json:"deployers,omitempty"`
	Readers    []string `json:"readers,omitempty"`
	// Namespaces binds identities to namespaces (AuthzConfig.Namespaces).
	Namespaces []struct {
		Identity   string   `json:"identity"`
		Namespaces []string `json:"namespaces"`
	} `json:"namespaces,omitempty"`
	Allow []struct {
		Method     string   `json:"method"`
		Identities []string `json:"identities"`
	} `json:"allow,omitempty"`
}

// k8sName is a namespace or a ServiceAccount name (prefix).
var k8sName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$`)

// Defaults of the flags; the chart's names for a release "tidal".
const (
	defaultTrustDomain   = "cluster.local"
	defaultNamespace     = "tidal"
	defaultAccountPrefix = "tidal"
	// A decider at 10,000 targets whose targets all change at once (a
	// restart replaying history) sends 10,000 Scale calls in a burst, and
	// all decider replicas share one identity.
	defaultMutatingRate  = 5000
	defaultMutatingBurst = 20000
	// A person's grpcurl or a tenant's dashboard reads a few times a
	// second; a read costs no API call, but a loop of them still costs
	// CPU that Scale needs.
	defaultReadRate  = 50
	defaultReadBurst = 200
	// A tenant's dashboard reads its namespace a few times a second, a
	// test harness polling a target up to ten; two fifths of an
	// identity's reads each leave an identity several tenants share room
	// for the rest while one floods.
	defaultNamespaceReadRate  = 20
	defaultNamespaceReadBurst = 80
	// Below the decider's 16 per caller and 256 in all
	// (--watch-max-streams-per-caller, --watch-max-streams): a tenant
	// watches its namespace from a few places, and one namespace's
	// watchers, however many identities they use, leave most of the
	// decider's slots to the others.
	defaultNamespaceWatchesPerCaller = 4
	defaultNamespaceWatches          = 32
	// A tenth of an identity's calls per namespace: KEDA's external scaler
	// answers a namespace at most 100 calls a second
	// (--keda-namespace-call-rate), so only a namespace whose calls are
	// refused anyway meets this bound, and ten such tenants to take all
	// of KEDA's rate.
	defaultNamespaceMutatingRate  = 500
	defaultNamespaceMutatingBurst = 2000
)

// RegisterFlags registers the authorization flags on fs.
func (c *AuthzConfig) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.TrustDomain, "authz-trust-domain", defaultTrustDomain, "SPIFFE trust domain of tidal's identities; identities of other trust domains may call only what --authz-allow or a role names them for.")
	fs.StringVar(&c.Namespace, "authz-namespace", defaultNamespace, "Namespace of tidal's ServiceAccounts, for the default identities spiffe://TRUST-DOMAIN/ns/NAMESPACE/sa/PREFIX-{collector,decider,actuator}.")
	fs.StringVar(&c.AccountPrefix, "authz-account-prefix", defaultAccountPrefix, "Prefix of tidal's ServiceAccount names (the chart's full name), for the default identities.")
	fs.Var(&c.Collectors, "authz-collectors", "Comma-separated SPIFFE IDs of collectors, which may call Ingest; empty means the default identity.")
	fs.Var(&c.Deciders, "authz-deciders", "Comma-separated SPIFFE IDs of deciders, which may call Scale; empty means the default identity.")
	fs.Var(&c.Actuators, "authz-actuators", "Comma-separated SPIFFE IDs of actuators, which may forward Scale to each other; empty means the default identity.")
	fs.Var(&c.Pushers, "authz-pushers", "Comma-separated SPIFFE IDs allowed to call PushStats and PushStatsStream (activators); none by default.")
	fs.Var(&c.Operators, "authz-operators", "Comma-separated SPIFFE IDs of operators, who may call Scale (of what tidal manages), Deploy, Undeploy and Update (of Functions) and KEDA's external scaler; none by default.")
	fs.Var(&c.Deployers, "authz-deployers", "Comma-separated SPIFFE IDs that may call Deploy, Undeploy and Update (riff's function deployer calls), for Functions only; none by default.")
	fs.Var(&c.Readers, "authz-readers", "Comma-separated SPIFFE IDs that may read every namespace (dashboards, the chart's reader certificate); an identity holding no role reads only its --authz-namespaces, by default its ServiceAccount's namespace.")
	fs.Var(&c.Namespaces, "authz-namespaces", "Binds identities to namespaces, SPIFFE_ID=NAMESPACE,...: every target, namespace and object the identity's calls name must be in them (a List or Watch must name one); repeatable, or bindings separated by ';'. An identity holding no role and no binding is bound to its ServiceAccount's namespace.")
	fs.Var(&c.KEDA, "authz-keda", "Comma-separated SPIFFE IDs of KEDA (its TriggerAuthentication's client certificate), which may call the collector's externalscaler.ExternalScaler methods; none by default.")
	fs.Var(&c.Allow, "authz-allow", "Extra rule METHOD_PREFIX=SPIFFE_ID,...: the identities may call every method whose full name starts with the prefix, e.g. /tidal.decider.v1.DeciderService/Ingest=spiffe://cluster.local/ns/x/sa/y; repeatable, or rules separated by ';'.")
	fs.StringVar(&c.File, "authz-file", "", "YAML or JSON file adding identities to roles, bindings and rules: {collectors, deciders, actuators, pushers, operators, keda, deployers, readers: [SPIFFE_ID...], namespaces: [{identity: SPIFFE_ID, namespaces: [NAMESPACE...]}], allow: [{method: PREFIX, identities: [SPIFFE_ID...]}]}.")
	fs.Float64Var(&c.MutatingRate, "authz-mutating-rate", defaultMutatingRate, "Calls per second each identity may make to methods that change something (a stream counts when opened); more get RESOURCE_EXHAUSTED. 0 means no bound.")
	fs.IntVar(&c.MutatingBurst, "authz-mutating-burst", defaultMutatingBurst, "Calls an identity may make at once above --authz-mutating-rate.")
	fs.Float64Var(&c.ReadRate, "authz-read-rate", defaultReadRate, "Reads per second each identity but tidal's own services may make (a stream counts when opened); more get RESOURCE_EXHAUSTED. 0 means no bound.")
	fs.IntVar(&c.ReadBurst, "authz-read-burst", defaultReadBurst, "Reads an identity may make at once above --authz-read-rate.")
	fs.Float64Var(&c.NamespaceReadRate, "authz-namespace-read-rate", defaultNamespaceReadRate, "Reads per second each identity but tidal's own services may make about one namespace (the one the request names; a List or Watch of every namespace counts as one), spent before --authz-read-rate, so a flood about one namespace leaves the identity's reads of the others; more get RESOURCE_EXHAUSTED. 0 means no bound.")
	fs.IntVar(&c.NamespaceReadBurst, "authz-namespace-read-burst", defaultNamespaceReadBurst, "Reads an identity may make about one namespace at once above --authz-namespace-read-rate.")
	fs.IntVar(&c.NamespaceWatchesPerCaller, "authz-namespace-watches-per-caller", defaultNamespaceWatchesPerCaller, "WatchDecisions streams each identity but tidal's own services may hold open about one namespace; one more gets RESOURCE_EXHAUSTED. 0 means no bound.")
	fs.Float64Var(&c.NamespaceMutatingRate, "authz-namespace-mutating-rate", defaultNamespaceMutatingRate, "Calls per second each identity but tidal's own services may make to methods that change something about one namespace (the one the request names; a stream of several counts as none, when opened), spent before --authz-mutating-rate, so that one tenant's ScaledObjects cannot spend KEDA's whole rate; more get RESOURCE_EXHAUSTED. 0 means no bound.")
	fs.IntVar(&c.NamespaceMutatingBurst, "authz-namespace-mutating-burst", defaultNamespaceMutatingBurst, "Calls an identity may make about one namespace at once above --authz-namespace-mutating-rate.")
	fs.IntVar(&c.NamespaceWatches, "authz-namespace-watches", defaultNamespaceWatches, "WatchDecisions streams all identities but tidal's own services may hold open about one namespace, so one tenant's many identities cannot take every watch; one more gets RESOURCE_EXHAUSTED. 0 means no bound.")
}

// Validate checks the flags and the file and builds the policy.
func (c *AuthzConfig) Validate() error {
	for _, b := range []struct {
		flag   string
		rate   float64
		burst  int
		finite bool
	}{
		{"authz-mutating", c.MutatingRate, c.MutatingBurst, false}, {"authz-read", c.ReadRate, c.ReadBurst, false},
		{"authz-namespace-read", c.NamespaceReadRate, c.NamespaceReadBurst, true},
		{"authz-namespace-mutating", c.NamespaceMutatingRate, c.NamespaceMutatingBurst, true},
	} {
		switch {
		case b.finite && (!(b.rate >= 0) || math.IsInf(b.rate, 0)):
			return fmt.Errorf("--%s-rate %g: want a finite number, at least 0", b.flag, b.rate)
		case b.rate < 0:
			return fmt.Errorf("--%s-rate %g: want at least 0", b.flag, b.rate)
		case b.rate > 0 && b.burst < 1:
			return fmt.Errorf("--%s-burst %d: want at least 1 with a rate", b.flag, b.burst)
		}
	}
	if c.NamespaceWatchesPerCaller < 0 {
		return fmt.Errorf("--authz-namespace-watches-per-caller %d: want at least 0", c.NamespaceWatchesPerCaller)
	}
	if c.NamespaceWatches < 0 {
		return fmt.Errorf("--authz-namespace-watches %d: want at least 0", c.NamespaceWatches)
	}
	for _, f := range []struct{ flag, v string }{{"authz-namespace", c.Namespace}, {"authz-account-prefix", c.AccountPrefix}} {
		if f.v != "" && !k8sName.MatchString(f.v) {
			return fmt.Errorf("--%s %s: want a Kubernetes name (a-z, 0-9, '-', '.')", f.flag, identity.Quote(f.v))
		}
	}
	p, err := c.build()
	if err != nil {
		return err
	}
	c.policy = p
	return nil
}

// policy is the table a caller's identity and a method are checked
// against.
type policy struct {
	trustDomain string
	// roles holds every identity with a role, by its URI form.
	roles map[string]Role
	allow []allowRule
	// named holds every identity a role, binding or rule names, whatever
	// its trust domain.
	named map[string]bool
	// bound holds the namespaces of every explicitly bound identity.
	bound map[string]map[string]bool
	// ruled holds the identities an allow rule names: like a role, a rule
	// is the administrator's grant, not a tenant's.
	ruled map[string]bool
}

func (c *AuthzConfig) build() (*policy, error) {
	td := cmp.Or(c.TrustDomain, defaultTrustDomain)
	ns, prefix := cmp.Or(c.Namespace, defaultNamespace), cmp.Or(c.AccountPrefix, defaultAccountPrefix)
	p := &policy{trustDomain: td, roles: map[string]Role{}, named: map[string]bool{}, bound: map[string]map[string]bool{}, ruled: map[string]bool{}}
	add := func(role Role, ids []identity.ID) {
		for _, id := range ids {
			p.roles[id.String()] |= role
			p.named[id.String()] = true
		}
	}
	for _, r := range []struct {
		role Role
		ids  idList
		// sa, when set, names the default identity: tidal's own services'.
		flag, sa string
	}{
		{RoleCollector, c.Collectors, "authz-collectors", "collector"}, {RoleDecider, c.Deciders, "authz-deciders", "decider"},
		{RoleActuator, c.Actuators, "authz-actuators", "actuator"}, {RolePusher, c.Pushers, "authz-pushers", ""},
		{RoleOperator, c.Operators, "authz-operators", ""}, {RoleKEDA, c.KEDA, "authz-keda", ""},
		{RoleDeployer, c.Deployers, "authz-deployers", ""}, {RoleReader, c.Readers, "authz-readers", ""},
	} {
		ids := r.ids
		if len(ids) == 0 && r.sa != "" {
			id, err := identity.New(td, ns, prefix+"-"+r.sa)
			if err != nil {
				return nil, fmt.Errorf("--%s: default from --authz-trust-domain, --authz-namespace, --authz-account-prefix: %w", r.flag, err)
			}
			ids = idList{id}
		}
		add(r.role, ids)
	}
	p.allow = slices.Clone(c.Allow)
	for _, b := range c.Namespaces {
		p.bind(b)
	}
	if c.File != "" {
		if err := p.addFile(c.File, add); err != nil {
			return nil, err
		}
	}
	for _, r := range p.allow {
		for _, id := range r.ids {
			p.named[id.String()] = true
			p.ruled[id.String()] = true
		}
	}
	return p, nil
}

func (p *policy) addFile(path string, add func(Role, []identity.ID)) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("--authz-file: %w", err)
	}
	var f authzFile
	if err := yaml.UnmarshalStrict(b, &f); err != nil {
		return fmt.Errorf("--authz-file %s: %w", path, err)
	}
	for _, r := range []struct {
		role Role
		key  string
		ids  []string
	}{
		{RoleCollector, "collectors", f.Collectors}, {RoleDecider, "deciders", f.Deciders},
		{RoleActuator, "actuators", f.Actuators}, {RolePusher, "pushers", f.Pushers}, {RoleOperator, "operators", f.Operators},
		{RoleKEDA, "keda", f.KEDA}, {RoleDeployer, "deployers", f.Deployers}, {RoleReader, "readers", f.Readers},
	} {
		ids, err := parseIDs(strings.Join(r.ids, ","))
		if err != nil {
			return fmt.Errorf("--authz-file %s: %s: %w", path, r.key, err)
		}
		add(r.role, ids)
	}
	for i, n := range f.Namespaces {
		b, err := newBinding(n.Identity, n.Namespaces)
		if err != nil {
			return fmt.Errorf("--authz-file %s: namespaces[%d]: %w", path, i, err)
		}
		p.bind(b)
	}
	for i, a := range f.Allow {
		r, err := newAllowRule(a.Method, a.Identities)
		if err != nil {
			return fmt.Errorf("--authz-file %s: allow[%d]: %w", path, i, err)
		}
		p.allow = append(p.allow, r)
	}
	return nil
}

// bind adds b's namespaces to its identity's.
func (p *policy) bind(b binding) {
	key := b.id.String()
	set := p.bound[key]
	if set == nil {
		set = map[string]bool{}
		p.bound[key] = set
	}
	for _, ns := range b.namespaces {
		set[ns] = true
	}
	p.named[key] = true
}

// scope is the namespaces a caller's requests may name; nil is every
// namespace.
func (p *policy) scope(id identity.ID, roles Role) map[string]bool {
	if set, ok := p.bound[id.String()]; ok {
		return set
	}
	if roles != 0 || p.ruled[id.String()] {
		return nil
	}
	if ns, _, ok := id.ServiceAccount(); ok {
		return map[string]bool{ns: true}
	}
	return map[string]bool{}
}

// ids returns the identities holding role.
func (p *policy) ids(role Role) map[string]bool {
	out := map[string]bool{}
	for id, r := range p.roles {
		if r&role != 0 {
			out[id] = true
		}
	}
	return out
}

// decision is the policy's answer for one call.
type decision struct {
	allowed bool
	// limited says the call counts against the caller's rate.
	limited bool
	// read says a limited call counts against the read budget, not the
	// mutating one; unlimited reads are tidal's own services'.
	read bool
	// service says the caller is one of tidal's own services, whose calls
	// follow from work that is budgeted already: no per-namespace budget
	// holds them back.
	service bool
	// scope is the namespaces the call's request may name; nil is any.
	scope map[string]bool
	// label is the caller's bounded metric label.
	label string
	// reason says why a call is refused.
	reason string
}

// decide checks a call of method by id; idErr says why the caller has no
// identity.
func (p *policy) decide(method string, id identity.ID, idErr error) decision {
	if idErr != nil {
		return decision{label: labelUnknown, reason: idErr.Error()}
	}
	key := id.String()
	roles := p.roles[key]
	d := decision{label: roles.label(), service: roles&serviceRoles != 0}
	if id.TrustDomain() != p.trustDomain && !p.named[key] {
		d.label = labelUnknown
		d.reason = fmt.Sprintf("trust domain %s is not %s", identity.Quote(id.TrustDomain()), identity.Quote(p.trustDomain))
		return d
	}
	d.scope = p.scope(id, roles)
	class, need := classify(method)
	if class == classRead {
		d.allowed, d.read, d.limited = true, true, roles&serviceRoles == 0
		return d
	}
	d.limited = true
	if roles&need != 0 {
		d.allowed = true
		return d
	}
	for _, r := range p.allow {
		if strings.HasPrefix(method, r.prefix) && slices.Contains(r.ids, id) {
			d.allowed = true
			return d
		}
	}
	if class == classMutating {
		d.reason = fmt.Sprintf("it is for %s; the caller is %s", need, roles)
	} else {
		d.reason = "no rule allows this method"
	}
	return d
}
