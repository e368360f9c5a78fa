// Verification overlay of kagent_governed_memory (tests/go_overlay); never part of the patch
// series. Copied into go/core/internal/httpserver/ of a kagent tree with the series applied,
// it serves the governed memory routes through the controller's own handlers, database client
// and middleware (authn, content type, logging, errors), registered exactly as server.go does,
// so the library's contract scenarios and the patched Python runtime can run against the
// compiled controller. Kubernetes-dependent parts are left out the way kagent's handler tests
// leave them out (no kube client; NoopAuthorizer).
//
// Run as a compiled test binary with:
//
//	KGM_TESTSERVER_ADDR_FILE  where to write "host:port" once listening (required)
//	KGM_TESTSERVER_DSN        the database login the controller uses (the service role)
//	KGM_TESTSERVER_LOCAL_SERVER  the local homeserver, recorded as server.go records it
//	KAGENT_MEMORY_SCOPE_PUBLIC_KEYS, KAGENT_MEMORY_SCOPE_ISSUER  as for the controller
//
// It serves until its standard input is closed.
package httpserver

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"testing"

	"github.com/gorilla/mux"

	coredatabase "github.com/kagent-dev/kagent/go/core/internal/database"
	authimpl "github.com/kagent-dev/kagent/go/core/internal/httpserver/auth"
	"github.com/kagent-dev/kagent/go/core/internal/httpserver/handlers"
	"github.com/kagent-dev/kagent/go/core/internal/memoryscope"
	"github.com/kagent-dev/kagent/go/core/pkg/auth"
)

func TestGovernedMemoryTestServer(t *testing.T) {
	addrFile := os.Getenv("KGM_TESTSERVER_ADDR_FILE")
	if addrFile == "" {
		t.Skip("verification overlay: run by kagent_governed_memory's tests only")
	}
	ctx := context.Background()
	// The controller's own connect path (pgvector types registered, as with the vector track).
	pool, err := coredatabase.Connect(ctx, &coredatabase.PostgresConfig{
		URL: os.Getenv("KGM_TESTSERVER_DSN"), VectorEnabled: true,
	})
	if err != nil {
		t.Fatalf("database: %v", err)
	}
	defer pool.Close()
	client := coredatabase.NewClient(pool)
	if server := os.Getenv("KGM_TESTSERVER_LOCAL_SERVER"); server != "" {
		recorded, err := client.ConfigureMemoryStore(ctx, server)
		if err != nil || recorded == nil || *recorded != server {
			t.Fatalf("local homeserver not recorded: %v", err)
		}
	}
	memory := handlers.NewMemoryHandler(&handlers.Base{
		DatabaseService: client,
		Authorizer:      &authimpl.NoopAuthorizer{},
	})
	// As app.go: the bridge's public keys from KAGENT_MEMORY_SCOPE_PUBLIC_KEYS[_FILE] and
	// KAGENT_MEMORY_SCOPE_ISSUER, or no verification when they are unset.
	verifier, err := memoryscope.VerifierFromEnv(os.Getenv)
	if err != nil {
		t.Fatalf("scope assertion keys: %v", err)
	}
	memory.ScopeVerifier = verifier
	routes := map[string]func(handlers.ErrorResponseWriter, *http.Request){
		"/generation": memory.HandleGovernedGeneration,
		"/admit":      memory.HandleGovernedAdmit,
		"/entries":    memory.HandleGovernedSave,
		"/search":     memory.HandleGovernedSearch,
		"/forget":     memory.HandleGovernedForget,
		"/consent":    memory.HandleGovernedConsent,
		"/status":     memory.HandleGovernedStatus,
		"/inspect":    memory.HandleGovernedInspect,
		"/forget-all": memory.HandleGovernedForgetAll,
		"/withdraw":   memory.HandleGovernedWithdraw,
		"/offboard":   memory.HandleGovernedOffboard,
	}
	router := mux.NewRouter()
	for path, h := range routes {
		router.HandleFunc(APIPathGovernedMemories+path, adaptHandler(h)).Methods(http.MethodPost)
	}
	router.Use(auth.AuthnMiddleware(&authimpl.UnsecureAuthenticator{}))
	router.Use(contentTypeMiddleware)
	router.Use(loggingMiddleware)
	router.Use(errorHandlerMiddleware)

	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	srv := &http.Server{Handler: router}
	go func() { _ = srv.Serve(listener) }()
	if err := os.WriteFile(addrFile, []byte(listener.Addr().String()), 0o600); err != nil {
		t.Fatalf("address file: %v", err)
	}
	_, _ = io.Copy(io.Discard, os.Stdin) // until the harness closes our standard input
	_ = srv.Shutdown(ctx)
}
