// Verification overlay of kagent_governed_memory (tests/go_overlay); never part of the patch
// series. Copied into go/core/internal/httpserver/ of a kagent tree with the series applied,
// it serves the governed memory listener exactly as app.go builds it (NewGovernedMemoryRouter:
// the controller's own handlers, authenticator, database client and middleware; the local
// homeserver recorded by ConfigureLocalServer; mandatory scope assertion verification), with
// the two Kubernetes dependencies replaced the way kagent's handler tests replace them: a fake
// TokenReviewer and a fake controller-runtime client holding the test Agents; NoopAuthorizer.
//
// Fixed test tokens (the fake TokenReview):
//
//	"kgm-test-sa:<namespace>:<name>"  authenticates ServiceAccount <namespace>/<name>
//	anything else                    is refused (401 unauthenticated)
//
// Agents (declarative, per-agent ServiceAccount named after the Agent) are
// KGM_TESTSERVER_AGENTS ("ns/name,...", default kagent/my-agent,kagent/agent-a,kagent/agent-b,
// kagent/other-agent; all governed, "ns/name@1024" with memory.embeddingDimension 1024); an agent calls with the token of ServiceAccount <ns>/<name> and
// X-Agent-Name "<ns>__NS__<name>" (kagent's app name, '-' as '_'). The bridge ServiceAccounts
// are KGM_TESTSERVER_BRIDGE_SERVICE_ACCOUNTS (default kagent/matrix-bridge), as
// --governed-memory-bridge-service-accounts.
//
// Run as a compiled test binary with:
//
//	KGM_TESTSERVER_ADDR_FILE  where to write "host:port" once listening (required)
//	KGM_TESTSERVER_DSN        the database login the controller uses (the service role)
//	KGM_TESTSERVER_LOCAL_SERVER  the local homeserver (--governed-memory-local-server)
//	KAGENT_MEMORY_SCOPE_PUBLIC_KEYS[_FILE], KAGENT_MEMORY_SCOPE_ISSUER  as for the controller
//	KGM_TESTSERVER_BIND       the listen address (default 127.0.0.1:0; a restart reuses one)
//
// The controller's logs go to standard output at debug level. GET /metrics serves the
// controller-runtime metrics registry (the controller serves it on its metrics listener), so
// the tests can read the governed memory counters.
//
// It serves until its standard input is closed.
package httpserver

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/kagent-dev/kagent/go/api/v1alpha2"
	coredatabase "github.com/kagent-dev/kagent/go/core/internal/database"
	authimpl "github.com/kagent-dev/kagent/go/core/internal/httpserver/auth"
	"github.com/kagent-dev/kagent/go/core/internal/httpserver/handlers"
	"github.com/kagent-dev/kagent/go/core/internal/memoryscope"
)

const kgmTestTokenPrefix = "kgm-test-sa:"

// kgmTestTokens is the fake TokenReview of the verification overlay.
type kgmTestTokens struct{}

func (kgmTestTokens) Review(_ context.Context, token string) (types.NamespacedName, error) {
	rest, ok := strings.CutPrefix(token, kgmTestTokenPrefix)
	if !ok {
		return types.NamespacedName{}, handlers.ErrTokenRejected
	}
	namespace, name, ok := strings.Cut(rest, ":")
	if !ok || namespace == "" || name == "" {
		return types.NamespacedName{}, handlers.ErrTokenRejected
	}
	return types.NamespacedName{Namespace: namespace, Name: name}, nil
}

func kgmEnv(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}

func TestGovernedMemoryTestServer(t *testing.T) {
	addrFile := os.Getenv("KGM_TESTSERVER_ADDR_FILE")
	if addrFile == "" {
		t.Skip("verification overlay: run by kagent_governed_memory's tests only")
	}
	// The controller's own logs, at debug level, on standard output: a sink the tests read.
	ctrllog.SetLogger(zap.New(zap.UseDevMode(true), zap.WriteTo(os.Stdout)))
	ctx := context.Background()
	// The controller's own connect path (pgvector types registered, as with the vector track).
	pool, err := coredatabase.Connect(ctx, &coredatabase.PostgresConfig{
		URL: os.Getenv("KGM_TESTSERVER_DSN"), VectorEnabled: true,
	})
	if err != nil {
		t.Fatalf("database: %v", err)
	}
	defer pool.Close()
	store := coredatabase.NewGovernedMemoryStore(pool)

	bridges, err := ParseBridgeServiceAccounts(kgmEnv("KGM_TESTSERVER_BRIDGE_SERVICE_ACCOUNTS", "kagent/matrix-bridge"))
	if err != nil {
		t.Fatalf("bridge service accounts: %v", err)
	}
	// As app.go: the bridge's public keys from KAGENT_MEMORY_SCOPE_PUBLIC_KEYS[_FILE] and
	// KAGENT_MEMORY_SCOPE_ISSUER; without them governed memory does not start.
	verifier, err := memoryscope.VerifierFromEnv(os.Getenv)
	if err != nil {
		t.Fatalf("scope assertion keys: %v", err)
	}
	cfg := GovernedMemoryConfig{
		BindAddr:              kgmEnv("KGM_TESTSERVER_BIND", "127.0.0.1:0"),
		LocalServer:           os.Getenv("KGM_TESTSERVER_LOCAL_SERVER"),
		BridgeServiceAccounts: bridges,
		Verifier:              verifier,
	}
	if err := ValidateGovernedMemoryConfig(cfg, true); err != nil {
		t.Fatalf("governed memory configuration: %v", err)
	}
	if err := ConfigureLocalServer(ctx, store, cfg.LocalServer); err != nil {
		t.Fatalf("local homeserver: %v", err)
	}

	scheme := runtime.NewScheme()
	if err := v1alpha2.AddToScheme(scheme); err != nil {
		t.Fatalf("scheme: %v", err)
	}
	var agents []client.Object
	for item := range strings.SplitSeq(kgmEnv("KGM_TESTSERVER_AGENTS", "kagent/my-agent,kagent/agent-a,kagent/agent-b,kagent/other-agent"), ",") {
		namespace, name, ok := strings.Cut(strings.TrimSpace(item), "/")
		if !ok {
			t.Fatalf("KGM_TESTSERVER_AGENTS: %q is not namespace/name", item)
		}
		// Every test Agent is governed (the listener serves no other); "@N" sets its
		// memory.embeddingDimension.
		declarative := &v1alpha2.DeclarativeAgentSpec{
			Memory: &v1alpha2.MemorySpec{ModelConfig: "embedding", Mode: v1alpha2.MemoryModeGoverned},
		}
		if base, dimension, withDimension := strings.Cut(name, "@"); withDimension {
			n, err := strconv.Atoi(dimension)
			if err != nil {
				t.Fatalf("KGM_TESTSERVER_AGENTS: %q has no dimension after @", item)
			}
			name = base
			declarative.Memory.EmbeddingDimension = int32(n)
		}
		agents = append(agents, &v1alpha2.Agent{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
			Spec:       v1alpha2.AgentSpec{Type: v1alpha2.AgentType_Declarative, Declarative: declarative},
		})
	}
	kube := fake.NewClientBuilder().WithScheme(scheme).WithObjects(agents...).Build()

	handler := handlers.NewGovernedMemoryHandler(&handlers.Base{
		KubeClient: kube,
		Authorizer: &authimpl.NoopAuthorizer{},
	}, store, verifier, cfg.LocalServer)
	authn := &handlers.GovernedMemoryAuthenticator{
		Reviewer:              handlers.NewCachingTokenReviewer(kgmTestTokens{}),
		KubeClient:            kube,
		BridgeServiceAccounts: bridges,
	}
	router := NewGovernedMemoryRouter(handler, authn)

	listener, err := net.Listen("tcp", cfg.BindAddr)
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(metrics.Registry, promhttp.HandlerOpts{}))
	mux.Handle("/", router)
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(listener) }()
	if err := os.WriteFile(addrFile, []byte(listener.Addr().String()), 0o600); err != nil {
		t.Fatalf("address file: %v", err)
	}
	fmt.Println("governed memory test server on", listener.Addr().String())
	_, _ = io.Copy(io.Discard, os.Stdin) // until the harness closes our standard input
	_ = srv.Shutdown(ctx)
}
