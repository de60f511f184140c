package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/idemctl/idemctl/internal/wire"
)

// effectTools leave one effect row per successful call among the built-in
// tools (docs/tools.md): what toolEffect falls back to for a server that
// does not list its tools.
var effectTools = map[string]bool{"charge": true, "send_email": true}

// toolEffect asks the server (GET /v1/tools, docs/api.md, "Tools") whether
// a successful call of tool records an effect row, so the effect checks fit
// registry tools (an http tool usually has one) as well as the built-ins.
// A server without that route (404) is an older one: the built-ins' table
// answers. A tool the server does not list is an error: every request
// would be refused.
func toolEffect(ctx context.Context, c *http.Client, base, tool string) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(base, "/")+wire.PathTools, nil)
	if err != nil {
		return false, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return false, fmt.Errorf("GET /v1/tools: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return false, fmt.Errorf("GET /v1/tools: reading body: %w", err)
	}
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return effectTools[tool], nil
	case resp.StatusCode != http.StatusOK:
		return false, fmt.Errorf("GET /v1/tools: HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(body)))
	}
	var list wire.Tools
	if err := json.Unmarshal(body, &list); err != nil {
		return false, fmt.Errorf("GET /v1/tools: %w", err)
	}
	var names []string
	for _, t := range list.Tools {
		if t.Name == tool {
			return t.Effect, nil
		}
		names = append(names, t.Name)
	}
	return false, fmt.Errorf("the server has no tool %q (it has: %s)", tool, strings.Join(names, ", "))
}
