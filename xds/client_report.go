package xds

import "errors"

// report tells ClientConfig.OnResult where the client stands after handling
// resp with req: a NACK reports its error; a re-send of the version just
// rejected reports nothing (the rejection stands); any other answer means
// the client runs what the control plane serves (applied now, or already
// running, e.g. after the control plane went back to the running version).
func (c *Client) report(resp *adsResponse, req *adsRequest) {
	if c.cfg.OnResult == nil || req == nil {
		return
	}
	version := resp.VersionInfo
	switch {
	case req.ErrorDetail != nil:
		c.cfg.OnResult(version, errors.New(req.ErrorDetail.Message))
	case version == c.rejected && contentSum(resp) == c.rejectedSum:
	default:
		c.cfg.OnResult(version, nil)
	}
}
