package apiclient

import (
	"context"
	"fmt"
	"io"
	"net/http"
)

// Download GETs path and copies the answer's body to w, with no time limit; an error answer
// becomes an *Error. It returns the bytes copied.
func (c *Client) Download(ctx context.Context, path string, w io.Writer) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", c.URL+path, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Accept", "application/octet-stream, application/json")
	if c.Token != "" {
		req.Header.Set("zt-session", c.Token)
	}
	hc := *c.HTTP
	hc.Timeout = 0
	resp, err := hc.Do(req)
	if err != nil {
		return 0, fmt.Errorf("GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return 0, decodeError(resp.StatusCode, data)
	}
	n, err := io.Copy(w, resp.Body)
	if err != nil {
		return n, fmt.Errorf("GET %s: %w", path, err)
	}
	return n, nil
}
