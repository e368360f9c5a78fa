package grpcserver_test

// The runtime grant verifier of the main test server when the series holds patch 0017:
// its memorygrant.Store (resolve through governed_memory.memory_grant_resolve), as the
// controller wires it. tests/go_controller_main.py copies this file only then.

import (
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/kagent-dev/kagent/go/core/internal/grpcserver"
	"github.com/kagent-dev/kagent/go/core/internal/memorygrant"
)

const mainGrantVerifierKind = "memorygrant.Store (0017)"

func mainGrantVerifier(pool *pgxpool.Pool) grpcserver.GrantVerifier {
	return &memorygrant.Store{Pool: pool}
}
