// Verification overlay of kagent_governed_memory (tests/go_overlay); never part of the patch
// series. Copied into go/core/internal/httpserver/ of a kagent tree with the series applied,
// it serves the governed memory listener exactly as app.go builds it (NewGovernedMemoryRouter:
// the controller's own handlers, authenticator, database client and middleware; the local
// homeserver recorded by ConfigureLocalServer; mandatory scope assertion verification), with
// the Kubernetes API replaced the way kagent's handler tests replace it: a controller-runtime
// fake client holding the test Agents and answering TokenReview creates as the API server does
// (honouring spec.audiences), read by the controller's real KubeTokenReviewer (its audience
// check included) behind NewCachingTokenReviewer; NoopAuthorizer.
//
// Fixed test tokens (the fake TokenReview API):
//
//	"kgm-test-sa:<namespace>:<name>"             ServiceAccount <namespace>/<name>, audience
//	                                             "kagent-governed-memory" (the governed one)
//	"kgm-test-aud:<audience>:<namespace>:<name>"  the same ServiceAccount, audience <audience>
//	                                             only (e.g. "kagent": kagent's own token)
//	anything else, or a review whose spec.audiences lacks the token's audience: not
//	authenticated (401 unauthenticated)
//
// Agents (declarative, per-agent ServiceAccount named after the Agent) are
// KGM_TESTSERVER_AGENTS ("ns/name,...", default kagent/my-agent,kagent/agent-a,kagent/agent-b,
// kagent/other-agent; all governed, "ns/name@1024" with memory.embeddingDimension 1024); an agent calls with the token of ServiceAccount <ns>/<name> and
// X-Agent-Name "<ns>__NS__<name>" (kagent's app name, '-' as '_'). Each test Agent has a Pod
// "<name>-0" as the controller runs it (labels app: kagent, kagent: <name>; serviceAccountName
// <name>; a fixed UID), and every token's TokenReview carries the pod claims of the Pod
// "<sa name>-0" (as for a projected token bound to it), so an agent's token is bound to its
// Agent's Pod. The bridge ServiceAccounts
// are KGM_TESTSERVER_BRIDGE_SERVICE_ACCOUNTS (default kagent/matrix-bridge), as
// --governed-memory-bridge-service-accounts.
//
// Run as a compiled test binary with:
//
//	KGM_TESTSERVER_ADDR_FILE  where to write "host:port" once listening (required)
//	KGM_TESTSERVER_DSN        the controller's serving login (runtime, bridge and operator roles)
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
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/kagent-dev/kagent/go/api/v1alpha2"
	coredatabase "github.com/kagent-dev/kagent/go/core/internal/database"
	authimpl "github.com/kagent-dev/kagent/go/core/internal/httpserver/auth"
	"github.com/kagent-dev/kagent/go/core/internal/httpserver/handlers"
	"github.com/kagent-dev/kagent/go/core/internal/memoryscope"
)

const (
	kgmTestTokenPrefix         = "kgm-test-sa:"
	kgmTestAudienceTokenPrefix = "kgm-test-aud:"
	// the audience of a "kgm-test-sa:" token: the governed listener's default audience
	kgmTestGovernedAudience = "kagent-governed-memory"
)

// kgmTestTokenIdentity maps a fixed test token to its ServiceAccount and audience.
func kgmTestTokenIdentity(token string) (audience, namespace, name string, ok bool) {
	rest, isSA := strings.CutPrefix(token, kgmTestTokenPrefix)
	audience = kgmTestGovernedAudience
	if !isSA {
		var isAud bool
		if rest, isAud = strings.CutPrefix(token, kgmTestAudienceTokenPrefix); !isAud {
			return "", "", "", false
		}
		if audience, rest, ok = strings.Cut(rest, ":"); !ok || audience == "" {
			return "", "", "", false
		}
	}
	namespace, name, ok = strings.Cut(rest, ":")
	if !ok || namespace == "" || name == "" || strings.Contains(name, ":") {
		return "", "", "", false
	}
	return audience, namespace, name, true
}

// kgmTestPodName and kgmTestPodUID name the Pod an agent token of ServiceAccount
// namespace/name is bound to: "<name>-0", with a fixed UID.
func kgmTestPodName(name string) string { return name + "-0" }

func kgmTestPodUID(namespace, name string) string {
	return "kgm-test-pod-uid-" + namespace + "-" + name
}

// kgmTestAgentPod is the Pod of the test Agent namespace/name as the controller's translator
// runs it: its selector labels, the per-agent ServiceAccount, the UID its tokens name.
func kgmTestAgentPod(namespace, name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: namespace,
			Name:      kgmTestPodName(name),
			UID:       types.UID(kgmTestPodUID(namespace, name)),
			Labels:    map[string]string{"app": "kagent", "kagent": name},
		},
		Spec: corev1.PodSpec{ServiceAccountName: name},
	}
}

// kgmTestKubeClient is the fake Kubernetes API of the overlay: a controller-runtime fake
// client holding objects, whose TokenReview create answers as the API server does for the
// fixed test tokens: authenticated, with status.audiences = [the token's audience], only if
// spec.audiences (empty: the API server's own audience, never a test token's) contains it.
func kgmTestKubeClient(scheme *runtime.Scheme, objects ...client.Object) client.Client {
	return fake.NewClientBuilder().WithScheme(scheme).WithObjects(objects...).
		WithInterceptorFuncs(interceptor.Funcs{
			Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
				review, isReview := obj.(*authenticationv1.TokenReview)
				if !isReview {
					return c.Create(ctx, obj, opts...)
				}
				review.Status = authenticationv1.TokenReviewStatus{}
				audience, namespace, name, ok := kgmTestTokenIdentity(review.Spec.Token)
				if !ok || !slices.Contains(review.Spec.Audiences, audience) {
					return nil
				}
				review.Status = authenticationv1.TokenReviewStatus{
					Authenticated: true,
					Audiences:     []string{audience},
					User: authenticationv1.UserInfo{
						Username: "system:serviceaccount:" + namespace + ":" + name,
						// a projected token is bound to the pod it was mounted in
						Extra: map[string]authenticationv1.ExtraValue{
							"authentication.kubernetes.io/pod-name": {kgmTestPodName(name)},
							"authentication.kubernetes.io/pod-uid":  {kgmTestPodUID(namespace, name)},
						},
					},
				}
				return nil
			},
		}).Build()
}

// kgmTestAuthenticator is the governed listener's authenticator as app.go builds it, on the
// overlay's fake Kubernetes API.
func kgmTestAuthenticator(kube client.Client, bridges []types.NamespacedName) *handlers.GovernedMemoryAuthenticator {
	return &handlers.GovernedMemoryAuthenticator{
		Reviewer:              handlers.NewCachingTokenReviewer(&handlers.KubeTokenReviewer{Client: kube}),
		KubeClient:            kube,
		BridgeServiceAccounts: bridges,
	}
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
	// The controller's own connect path (app.go's connectGovernedMemory): pgvector types
	// registered and the server log parameters pinned and checked on every connection, then
	// the serving login registered as a verifier and the controller's policy required.
	pool, err := coredatabase.ConnectGoverned(ctx, os.Getenv("KGM_TESTSERVER_DSN"))
	if err != nil {
		t.Fatalf("database: %v", err)
	}
	defer pool.Close()
	store := coredatabase.NewGovernedMemoryStore(pool)
	if err := handlers.PrepareGovernedServing(ctx, store, pool.Config().ConnConfig.User); err != nil {
		t.Fatalf("governed memory: %v", err)
	}

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
	if err := corev1.AddToScheme(scheme); err != nil {
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
		}, kgmTestAgentPod(namespace, name))
	}
	kube := kgmTestKubeClient(scheme, agents...)

	handler := handlers.NewGovernedMemoryHandler(&handlers.Base{
		KubeClient: kube,
		Authorizer: &authimpl.NoopAuthorizer{},
	}, store, verifier, cfg.LocalServer)
	authn := kgmTestAuthenticator(kube, bridges)
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
