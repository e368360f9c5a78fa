package grpcserver_test

// The runtime grant verifier of the main test server while patch 0017 (memorygrant.Store) is
// not in the series: a STAND-IN over governed_memory.memory_grant_resolve, copied by
// tests/go_controller_main.py only then. TO BE REPLACED by 0017's store
// (governed_memory_main_grants_store_test.go), which the harness uses as soon as the series
// holds go/core/internal/memorygrant.

import (
	"context"
	"crypto/sha256"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/kagent-dev/kagent/go/core/internal/grpcserver"
	"k8s.io/apimachinery/pkg/types"
)

const mainGrantVerifierKind = "memory_grant_resolve stand-in (0017 not in the series)"

type dbGrants struct{ pool *pgxpool.Pool }

func mainGrantVerifier(pool *pgxpool.Pool) grpcserver.GrantVerifier { return dbGrants{pool: pool} }

func (g dbGrants) VerifyGrant(ctx context.Context, hash [sha256.Size]byte) (*grpcserver.RuntimeGrant, error) {
	var namespace, name, actor string
	var assertion []byte
	err := g.pool.QueryRow(ctx, "SELECT agent_namespace, agent_name, actor_id, assertion_hash"+
		" FROM governed_memory.memory_grant_resolve($1)", hash[:]).Scan(&namespace, &name, &actor, &assertion)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	grant := &grpcserver.RuntimeGrant{Agent: types.NamespacedName{Namespace: namespace, Name: name}, ActorID: actor}
	if copy(grant.AssertionHash[:], assertion) != sha256.Size {
		return nil, errors.New("malformed grant binding")
	}
	return grant, nil
}
