#!/bin/bash
# probe.sh TREE SRC_TREE_FOR_INTERCEPTORS: builds a throwaway copy of grpcserver's interceptors
# (plus the few declarations they use from policy.go/server.go) as TREE/go/core/internal/zz_grpcserverprobe,
# so the interceptor tests can run although package grpcserver needs substrate. Never committed.
set -e
TREE=$1; IMPL=${2:-$1}
D=$TREE/go/core/internal/zz_grpcserverprobe
rm -rf "$D"; mkdir -p "$D"
cp "$IMPL/go/core/internal/grpcserver/interceptors.go" "$D/"
cp "$TREE/go/core/internal/grpcserver/interceptors_test.go" "$D/"
[ -f "$TREE/go/core/internal/grpcserver/interceptors_logs_test.go" ] && cp "$TREE/go/core/internal/grpcserver/interceptors_logs_test.go" "$D/"
cat > "$D/decls.go" <<'GO'
package grpcserver

import (
	"context"

	dbpkg "github.com/kagent-dev/kagent/go/api/database"
)

// Copied from policy.go and server.go at the snapshot.
type AccessMode string

const (
	AccessPublic AccessMode = "public"
	AccessRead   AccessMode = "read"
	AccessCreate AccessMode = "create"
	AccessUpdate AccessMode = "update"
	AccessDelete AccessMode = "delete"
)

type MethodPolicies map[string]AccessMode

type ShareStore interface {
	GetSessionShareByToken(context.Context, string) (*dbpkg.SessionShare, error)
	RecordShareAccess(context.Context, string, int64) error
}
GO
echo "$D"
