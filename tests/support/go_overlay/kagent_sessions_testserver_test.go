// Verification overlay of kagent_governed_memory (tests/go_overlay); never part of the patch
// series. Copied into go/core/internal/httpserver/ beside governed_memory_testserver_test.go,
// it adds, when asked, kagent's own main API listener to the governed memory test server:
// the router that server.go's setupRoutes builds (NewHTTPServer + setupRoutes: /api/sessions,
// /api/tasks and every other route, kagent's AuthnMiddleware with the UnsecureAuthenticator --
// the user id from ?user_id= or X-User-Id, the agent from X-Agent-Name, as kagent-adk's
// KAgentSessionService and KAgentTaskStore send them -- NoopAuthorizer), backed by kagent's
// real database client (database.NewClient on database.Connect) with kagent's core migrations
// applied by kagent's own runner (migrations.RunUp, core track). The vector track's legacy
// `memory` table (vector migrations 000001-000003, before the series' governed tables, which
// the tests' fixtures create with the library's migrations) is applied too, so that a grep of
// "every table" covers kagent's legacy memory table as well.
//
// Each Agent of KGM_TESTSERVER_AGENTS is upserted into kagent's `agent` table as the
// reconciler does (id "<ns>__NS__<name>", type Declarative, workload deployment), so that
// POST /api/sessions with agent_ref = the app name finds it.
//
// Run (with TestGovernedMemoryTestServer, in the same process) when these are set:
//
//	KGM_TESTSERVER_SESSIONS_ADDR_FILE  where to write "host:port" once listening
//	KGM_TESTSERVER_SESSIONS_DSN        kagent's database login for its core tables (the owner
//	                                   of the database: the migrations create tables);
//	                                   default KGM_TESTSERVER_DSN
//
// A failure to start exits the process with status 3 and the reason on standard output.
package httpserver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"

	"github.com/golang-migrate/migrate/v4"
	migratepgx "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/gorilla/mux"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	dbpkg "github.com/kagent-dev/kagent/go/api/database"
	"github.com/kagent-dev/kagent/go/api/v1alpha2"
	coredatabase "github.com/kagent-dev/kagent/go/core/internal/database"
	authimpl "github.com/kagent-dev/kagent/go/core/internal/httpserver/auth"
	"github.com/kagent-dev/kagent/go/core/internal/utils"
	"github.com/kagent-dev/kagent/go/core/pkg/migrations"
)

// kgmLegacyVectorVersion is the last vector migration before the series' governed tables.
const kgmLegacyVectorVersion = 3

func init() {
	addrFile := os.Getenv("KGM_TESTSERVER_SESSIONS_ADDR_FILE")
	if addrFile == "" {
		return
	}
	go func() {
		if err := kgmServeSessions(addrFile); err != nil {
			fmt.Println("kagent sessions test server failed:", err)
			os.Exit(3)
		}
	}()
}

func kgmServeSessions(addrFile string) error {
	ctx := context.Background()
	dsn := kgmEnv("KGM_TESTSERVER_SESSIONS_DSN", os.Getenv("KGM_TESTSERVER_DSN"))
	if err := migrations.RunUp(dsn, migrations.FS, false); err != nil {
		return fmt.Errorf("core migrations: %w", err)
	}
	if err := kgmLegacyVectorTrack(dsn); err != nil {
		return fmt.Errorf("vector migrations up to %d: %w", kgmLegacyVectorVersion, err)
	}
	pool, err := coredatabase.Connect(ctx, &coredatabase.PostgresConfig{URL: dsn, VectorEnabled: true})
	if err != nil {
		return fmt.Errorf("database: %w", err)
	}
	db := coredatabase.NewClient(pool)
	for item := range strings.SplitSeq(kgmEnv("KGM_TESTSERVER_AGENTS", "kagent/my-agent,kagent/agent-a,kagent/agent-b,kagent/other-agent"), ",") {
		ref := strings.TrimSpace(item)
		if err := db.StoreAgent(ctx, &dbpkg.Agent{
			ID:           utils.ConvertToPythonIdentifier(ref),
			Type:         string(v1alpha2.AgentType_Declarative),
			WorkloadType: v1alpha2.WorkloadModeDeployment,
		}); err != nil {
			return fmt.Errorf("agent %s: %w", ref, err)
		}
	}

	scheme := runtime.NewScheme()
	if err := v1alpha2.AddToScheme(scheme); err != nil {
		return fmt.Errorf("scheme: %w", err)
	}
	server, err := NewHTTPServer(ServerConfig{
		Router:        mux.NewRouter(),
		KubeClient:    fake.NewClientBuilder().WithScheme(scheme).Build(),
		DbClient:      db,
		Authenticator: &authimpl.UnsecureAuthenticator{},
		Authorizer:    &authimpl.NoopAuthorizer{},
	})
	if err != nil {
		return fmt.Errorf("http server: %w", err)
	}
	server.setupRoutes() // exactly the routes and middleware of kagent's main API server

	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	go func() { _ = (&http.Server{Handler: server.router}).Serve(listener) }()
	if err := os.WriteFile(addrFile, []byte(listener.Addr().String()), 0o600); err != nil {
		return fmt.Errorf("address file: %w", err)
	}
	fmt.Println("kagent sessions test server on", listener.Addr().String())
	return nil
}

// kgmLegacyVectorTrack applies kagent's vector migrations up to kgmLegacyVectorVersion (the
// legacy memory table), with the runner's own driver and table (vector_schema_migrations).
func kgmLegacyVectorTrack(dsn string) error {
	conn, err := sql.Open("pgx", dsn)
	if err != nil {
		return err
	}
	src, err := iofs.New(migrations.FS, "vector")
	if err != nil {
		return err
	}
	driver, err := migratepgx.WithInstance(conn, &migratepgx.Config{MigrationsTable: "vector_schema_migrations"})
	if err != nil {
		return err
	}
	mg, err := migrate.NewWithInstance("iofs", src, "postgres", driver)
	if err != nil {
		return err
	}
	defer mg.Close()
	if err := mg.Migrate(kgmLegacyVectorVersion); err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return err
	}
	return nil
}
