package apiclient

import (
	"context"
	"fmt"
	"io"
	"net/http"
)

// Download GETs path and copies the answer's body to w, with no time limit; an error answer
// becomes an *Error. It returns the bytes copied. Like every call it moves to the next
// controller while none has answered; once the copy has begun it stays with that one.
func (c *Client) Download(ctx context.Context, path string, w io.Writer) (int64, error) {
	accept := http.Header{"Accept": {"application/octet-stream, application/json"}}
	resp, err := c.do(ctx, request{method: "GET", path: path, header: accept, noTimeout: true})
	if err != nil {
		return 0, err
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
