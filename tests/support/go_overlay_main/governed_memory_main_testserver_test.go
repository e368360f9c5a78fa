package grpcserver_test

// A verification overlay of kagent_governed_memory (tests/go_overlay_main), never part of the
// patch series: tests/go_controller_main.py copies it into a kagent main tree holding the Go
// patches and compiles this package's test binary. TestGovernedMemoryMainTestServer then serves
// main's real gRPC server (New + Start: its interceptor chain, GovernedAuth and the
// GovernedMemoryServer handlers of 0015/0016) on a loopback port, over the governed pool of the
// embedded PostgreSQL, until its standard input is closed. It is skipped unless the harness
// sets KGM_MAIN_ADDR_FILE.
//
// Credentials: bridge and operator callers present a bearer that testTokenReviewer maps to a
// ServiceAccount (the fixed test tokens of go_controller.py); runtime callers present the grant
// the harness minted through the grants login (memory_grant_mint, the A2A transport's part),
// resolved by mainGrantVerifier: 0017's memorygrant.Store when the series has it
// (governed_memory_main_grants_store_test.go), else a stand-in over memory_grant_resolve
// (governed_memory_main_grants_db_test.go); the harness copies exactly one of the two.
// An external test package: memorygrant imports grpcserver.

import (
	"context"
	"io"
	"net"
	"os"
	"strings"
	"testing"

	dbimpl "github.com/kagent-dev/kagent/go/core/internal/database"
	"github.com/kagent-dev/kagent/go/core/internal/grpcserver"
	"github.com/kagent-dev/kagent/go/core/internal/memoryscope"
	"github.com/kagent-dev/kagent/go/core/pkg/migrations"
	"github.com/prometheus/client_golang/prometheus"
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

const (
	mainTestTokenPrefix    = "kgm-test-sa:"
	mainTestAudiencePrefix = "kgm-test-aud:"
)

// testTokenReviewer is a fake TokenReview: "kgm-test-sa:<ns>:<name>" is ServiceAccount ns/name
// with the governed audience, "kgm-test-aud:<aud>:<ns>:<name>" the same for audience aud only;
// anything else is unauthenticated.
type testTokenReviewer struct{}

func (testTokenReviewer) ReviewToken(_ context.Context, token string, _ []string) (*authenticationv1.TokenReviewStatus, error) {
	audience, rest := grpcserver.GovernedAudience, ""
	if after, ok := strings.CutPrefix(token, mainTestTokenPrefix); ok {
		rest = after
	} else if after, ok := strings.CutPrefix(token, mainTestAudiencePrefix); ok {
		audience, rest, _ = strings.Cut(after, ":")
	} else {
		return &authenticationv1.TokenReviewStatus{Authenticated: false}, nil
	}
	namespace, name, ok := strings.Cut(rest, ":")
	if !ok || namespace == "" || name == "" {
		return &authenticationv1.TokenReviewStatus{Authenticated: false}, nil
	}
	return &authenticationv1.TokenReviewStatus{
		Authenticated: true, Audiences: []string{audience},
		User: authenticationv1.UserInfo{Username: "system:serviceaccount:" + namespace + ":" + name},
	}, nil
}

func mainAccounts(value string) []types.NamespacedName {
	var out []types.NamespacedName
	for _, item := range strings.Split(value, ",") {
		if namespace, name, ok := strings.Cut(strings.TrimSpace(item), "/"); ok {
			out = append(out, types.NamespacedName{Namespace: namespace, Name: name})
		}
	}
	return out
}

func TestGovernedMemoryMainTestServer(t *testing.T) {
	addrFile := os.Getenv("KGM_MAIN_ADDR_FILE")
	if addrFile == "" {
		t.Skip("verification overlay: run by kagent_governed_memory's tests only")
	}
	// the controller's log (its RPC and governed operation lines) on stdout, for the harness
	ctrllog.SetLogger(zap.New(zap.UseDevMode(true), zap.WriteTo(os.Stdout)))
	ctx := ctrllog.IntoContext(context.Background(), ctrllog.Log)
	if dsn := os.Getenv("KGM_MAIN_MIGRATE_DSN"); dsn != "" {
		// main's own migration runner: the core, vector and governed tracks, as the owner
		if err := migrations.RunUp(ctx, dsn, migrations.BuiltinSources(true, migrations.WithGovernedMemory(true))); err != nil {
			t.Fatalf("migrate: %v", err)
		}
	}
	pool, err := dbimpl.ConnectGoverned(ctx, &dbimpl.PostgresConfig{URL: os.Getenv("KGM_MAIN_DSN")})
	if err != nil {
		t.Fatalf("ConnectGoverned: %v", err)
	}
	defer pool.Close()
	local := os.Getenv("KGM_MAIN_LOCAL_SERVER")
	store := dbimpl.NewGovernedMemoryStore(pool)
	if err := store.RegisterMemoryVerifier(ctx, pool.Config().ConnConfig.User); err != nil {
		t.Fatalf("RegisterMemoryVerifier: %v", err)
	}
	if _, err := store.ConfigureMemoryStore(ctx, local); err != nil {
		t.Fatalf("ConfigureMemoryStore: %v", err)
	}
	verifier, err := memoryscope.VerifierFromEnv(os.Getenv)
	if err != nil {
		t.Fatalf("scope verifier: %v", err)
	}
	bind := os.Getenv("KGM_MAIN_BIND")
	if bind == "" {
		bind = "127.0.0.1:0"
	}
	listener, err := net.Listen("tcp", bind)
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	server, err := grpcserver.New(grpcserver.Config{
		Listener: listener, Registerer: prometheus.NewRegistry(),
		GovernedMemory: &grpcserver.GovernedMemoryServer{Store: store, Verifier: verifier, LocalServer: local},
		GovernedAuth: &grpcserver.GovernedAuth{Grants: mainGrantVerifier(pool), Reviewer: testTokenReviewer{},
			Bridges:   mainAccounts(os.Getenv("KGM_MAIN_BRIDGES")),
			Operators: mainAccounts(os.Getenv("KGM_MAIN_OPERATORS"))},
	})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Logf("runtime grants verified by %s", mainGrantVerifierKind)
	serveCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- server.Start(serveCtx) }()
	if err := os.WriteFile(addrFile+".tmp", []byte(listener.Addr().String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(addrFile+".tmp", addrFile); err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, os.Stdin) // until the harness closes our standard input
	cancel()
	if err := <-done; err != nil {
		t.Logf("server stopped: %v", err)
	}
}
