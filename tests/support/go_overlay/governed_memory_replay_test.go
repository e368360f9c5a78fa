// Verification overlay of kagent_governed_memory (tests/go_overlay); never part of the patch
// series. Copied into go/core/internal/httpserver/ of a kagent tree with the series applied
// (beside governed_memory_testserver_test.go, whose fake Kubernetes API and authenticator it
// uses), it shows that a token kagent's A2A proxy hands to an agent pod cannot be replayed on the
// governed memory bridge routes.
//
// The bridge calls an agent through kagent's real A2A proxy: the handler mux of
// a2a.NewA2AHttpMux with kagent's default ("unsecure") authenticator, routed as server.go routes
// it, and an A2A client built as A2ARegistrar.upsertAgentHandler builds it (JSON-RPC transport,
// the legacy 0.3 compat transport, NewUpstreamAuthInterceptor). A stand-in agent pod records
// every header it receives. The test asserts the pod received the bridge's Authorization header
// (the replay material is real), then replays the captured headers on each bridge route of
// NewGovernedMemoryRouter: each must be 401 unauthenticated. The same requests with the
// bridge's governed-audience token must pass authentication (not 401, not 403), so the refusal
// is due to the token's audience.
//
// Run by tests/test_token_replay.py: KGM_REPLAY_TEST=1, -test.run ^TestGovernedMemoryTokenReplay$.
package httpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	a2atype "github.com/a2aproject/a2a-go/v2/a2a"
	a2aclient "github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2acompat/a2av0"
	"github.com/gorilla/mux"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kagent-dev/kagent/go/api/v1alpha2"
	"github.com/kagent-dev/kagent/go/core/internal/a2a"
	coredatabase "github.com/kagent-dev/kagent/go/core/internal/database"
	authimpl "github.com/kagent-dev/kagent/go/core/internal/httpserver/auth"
	"github.com/kagent-dev/kagent/go/core/internal/httpserver/handlers"
)

const (
	// the bridge's kagent-audience token: what it sends to kagent's A2A API
	kgmReplayKagentToken = "kgm-test-aud:kagent:kagent:matrix-bridge"
	// the bridge's governed-audience token: what the governed listener accepts
	kgmReplayGovernedToken = "kgm-test-sa:kagent:matrix-bridge"
	kgmReplayScopeHeader   = "X-Kagent-Memory-Scope"
	kgmReplayScopeValue    = "opaque-scope-assertion"
)

// kgmStandInAgent is an agent pod: it records the headers of every request and answers an
// A2A JSON-RPC message/send (legacy 0.3 wire, as kagent's runtimes speak) with an agent message.
type kgmStandInAgent struct {
	mu      sync.Mutex
	headers []http.Header
}

func (s *kgmStandInAgent) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.headers = append(s.headers, r.Header.Clone())
	s.mu.Unlock()
	var req struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
	}
	body, _ := io.ReadAll(r.Body)
	if err := json.Unmarshal(body, &req); err != nil || req.Method != "message/send" {
		http.Error(w, "unexpected request", http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"jsonrpc": "2.0",
		"id":      req.ID,
		"result": map[string]any{
			"kind": "message", "messageId": "reply-1", "role": "agent",
			"parts": []map[string]any{{"kind": "text", "text": "ok"}},
		},
	})
}

func (s *kgmStandInAgent) received() []http.Header {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]http.Header(nil), s.headers...)
}

// kgmA2AProxy is kagent's A2A API for one agent whose pod is at agentURL: the real handler mux
// and upstream auth interceptor, with kagent's default authenticator, routed as server.go does.
func kgmA2AProxy(t *testing.T, agentRef types.NamespacedName, agentURL string) http.Handler {
	t.Helper()
	authenticator := &authimpl.UnsecureAuthenticator{} // kagent's default (--auth-mode unsecure)
	ctx := context.Background()
	interfaces := []*a2atype.AgentInterface{{
		URL:             agentURL,
		ProtocolBinding: a2atype.TransportProtocolJSONRPC,
		ProtocolVersion: a2atype.ProtocolVersion("0.3"),
	}}
	// As A2ARegistrar.upsertAgentHandler (httpClient nil: the SDK default).
	var httpClient *http.Client
	client, err := a2aclient.NewFromEndpoints(ctx, interfaces,
		a2aclient.WithJSONRPCTransport(httpClient),
		a2aclient.WithCompatTransport(
			a2atype.ProtocolVersion("0.3"),
			a2atype.TransportProtocolJSONRPC,
			a2aclient.TransportFactoryFn(func(_ context.Context, _ *a2atype.AgentCard, iface *a2atype.AgentInterface) (a2aclient.Transport, error) {
				return a2av0.NewJSONRPCTransport(a2av0.JSONRPCTransportConfig{URL: iface.URL, Client: httpClient}), nil
			}),
		),
		a2aclient.WithCallInterceptors(a2a.NewUpstreamAuthInterceptor(authenticator, agentRef)),
	)
	if err != nil {
		t.Fatalf("A2A client: %v", err)
	}
	card := a2atype.AgentCard{
		Name:                strings.ReplaceAll(agentRef.Name, "-", "_"),
		SupportedInterfaces: []*a2atype.AgentInterface{{URL: "http://kagent.test" + APIPathA2A + "/" + agentRef.String() + "/", ProtocolBinding: a2atype.TransportProtocolJSONRPC, ProtocolVersion: a2atype.ProtocolVersion("0.3")}},
		Skills:              []a2atype.AgentSkill{},
		DefaultInputModes:   []string{"text"},
		DefaultOutputModes:  []string{"text"},
	}
	handlerMux := a2a.NewA2AHttpMux(APIPathA2A, APIPathA2ASandboxes, authenticator)
	if err := handlerMux.SetAgentHandler(agentRef.String(), client, card, nil); err != nil {
		t.Fatalf("A2A handler: %v", err)
	}
	router := mux.NewRouter()
	router.PathPrefix(APIPathA2A + "/{namespace}/{name}").Handler(handlerMux)
	return router
}

func TestGovernedMemoryTokenReplay(t *testing.T) {
	if os.Getenv("KGM_REPLAY_TEST") == "" {
		t.Skip("verification overlay: run by kagent_governed_memory's tests only")
	}
	agentRef := types.NamespacedName{Namespace: "kagent", Name: "my-agent"}

	// 1. The bridge sends message/send for the agent through kagent's A2A proxy.
	agent := &kgmStandInAgent{}
	pod := httptest.NewServer(agent)
	defer pod.Close()
	proxy := httptest.NewServer(kgmA2AProxy(t, agentRef, pod.URL))
	defer proxy.Close()
	send := `{"jsonrpc":"2.0","id":"1","method":"message/send","params":{"message":` +
		`{"kind":"message","messageId":"m-1","role":"user","parts":[{"kind":"text","text":"hi"}]}}}`
	req, _ := http.NewRequest(http.MethodPost, proxy.URL+APIPathA2A+"/"+agentRef.String()+"/", strings.NewReader(send))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+kgmReplayKagentToken)
	req.Header.Set(kgmReplayScopeHeader, kgmReplayScopeValue)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("A2A message/send through kagent's proxy: %v", err)
	}
	respBody, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(respBody), `"reply-1"`) {
		t.Fatalf("A2A message/send through kagent's proxy: %d %s", resp.StatusCode, respBody)
	}
	received := agent.received()
	if len(received) == 0 {
		t.Fatal("the stand-in agent pod received no request")
	}
	captured := received[len(received)-1]
	if got := captured.Get("Authorization"); got != "Bearer "+kgmReplayKagentToken {
		t.Fatalf("kagent's proxy did not forward the bridge's Authorization header to the pod (got %d bytes)", len(got))
	}
	if got := captured.Get(kgmReplayScopeHeader); got != kgmReplayScopeValue {
		t.Fatalf("kagent's proxy did not forward %s to the pod", kgmReplayScopeHeader)
	}
	t.Logf("the agent pod received the bridge's Authorization and %s headers (%d headers in all)",
		kgmReplayScopeHeader, len(captured))

	// 2. The pod replays them on the governed listener's bridge routes.
	scheme := runtime.NewScheme()
	if err := v1alpha2.AddToScheme(scheme); err != nil {
		t.Fatalf("scheme: %v", err)
	}
	kube := kgmTestKubeClient(scheme)
	bridges := []types.NamespacedName{{Namespace: "kagent", Name: "matrix-bridge"}}
	// No database: every request below stops at authentication or at request validation.
	store := coredatabase.NewGovernedMemoryStore(nil)
	handler := handlers.NewGovernedMemoryHandler(&handlers.Base{
		KubeClient: kube,
		Authorizer: &authimpl.NoopAuthorizer{},
	}, store, nil, "example.org")
	governed := httptest.NewServer(NewGovernedMemoryRouter(handler, kgmTestAuthenticator(kube, bridges)))
	defer governed.Close()

	call := func(route string, header http.Header) (int, string) {
		r, _ := http.NewRequest(http.MethodPost, governed.URL+APIPathGovernedMemories+route, bytes.NewReader([]byte("{}")))
		for name, values := range header {
			switch strings.ToLower(name) {
			case "content-length", "accept-encoding", "traceparent", "tracestate":
				continue
			}
			r.Header[name] = values
		}
		r.Header.Set("Content-Type", "application/json")
		got, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatalf("%s: %v", route, err)
		}
		defer got.Body.Close()
		var body struct {
			Error string `json:"error"`
		}
		_ = json.NewDecoder(got.Body).Decode(&body)
		return got.StatusCode, body.Error
	}
	routes := []string{"/consent", "/status", "/inspect", "/forget", "/forget-all", "/withdraw", "/offboard"}
	for _, route := range routes {
		replayStatus, replayCode := call(route, captured)
		if replayStatus != http.StatusUnauthorized || replayCode != "unauthenticated" {
			t.Errorf("replayed kagent-audience token on %s: got %d %q, want 401 \"unauthenticated\"", route, replayStatus, replayCode)
		}
		governedHeader := captured.Clone()
		governedHeader.Set("Authorization", "Bearer "+kgmReplayGovernedToken)
		status, code := call(route, governedHeader)
		if status == http.StatusUnauthorized || status == http.StatusForbidden || code == "unauthenticated" || code == "forbidden" {
			t.Errorf("the bridge's governed-audience token on %s: got %d %q, want it past authentication", route, status, code)
		}
		t.Logf("%s: replayed kagent-audience token answered %d %q; governed-audience token %d %q",
			route, replayStatus, replayCode, status, code)
	}
}
