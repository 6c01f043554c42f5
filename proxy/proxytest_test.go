package proxy_test

import (
	"reflect"
	"testing"

	"github.com/stormgate/stormgate/proxy"
	"github.com/stormgate/stormgate/proxy/proxytest"
)

// TestProxytestConfigIsTestConfig: the settings other packages' tests run a Server with
// (proxytest.Config) are the ones this package's own tests do (testConfig).
func TestProxytestConfigIsTestConfig(t *testing.T) {
	if got, want := proxytest.Config("127.0.0.1:1"), proxy.ShippedConfig("127.0.0.1:1"); !reflect.DeepEqual(got, want) {
		t.Errorf("proxytest.Config\n%+v\ntestConfig\n%+v", got, want)
	}
}
