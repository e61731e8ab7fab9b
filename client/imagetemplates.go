package client

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
)

// BuildEvent is one progress event of a template build from an image.
type BuildEvent = TemplateBuildEvent

// BuildTemplateFromImage builds template name from an OCI image and calls
// fn (if set) for each progress event. It returns the template once the
// build is done, or the error that ended it (an *APIError with Status 0
// when hostd reported it inside the stream).
func (c *Client) BuildTemplateFromImage(ctx context.Context, name string, poolSize int, img ImageSource, fn func(BuildEvent)) (Template, error) {
	resp, err := c.raw.CreateTemplate(ctx, CreateTemplateRequest{Name: name, PoolSize: poolSize, Image: &img})
	if err != nil {
		return Template{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Template{}, readAPIError(resp)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), maxEventLine)
	for sc.Scan() {
		var ev BuildEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return Template{}, fmt.Errorf("client: bad build event: %w", err)
		}
		switch ev.Type {
		case TemplateBuildEventTypeDone:
			if ev.Template == nil {
				return Template{}, fmt.Errorf("client: build done without a template")
			}
			return *ev.Template, nil
		case TemplateBuildEventTypeError:
			if ev.Error == nil {
				return Template{}, &APIError{Code: "internal", Message: "template build failed"}
			}
			e := &APIError{Code: ev.Error.Code, Message: ev.Error.Message}
			if ev.Status != nil {
				e.Status = *ev.Status
			}
			return Template{}, e
		}
		if fn != nil {
			fn(ev)
		}
	}
	if err := sc.Err(); err != nil {
		return Template{}, err
	}
	return Template{}, fmt.Errorf("client: the build stream ended without a result")
}
