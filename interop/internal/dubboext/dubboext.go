// Package dubboext registers the dubbo-go v3.3.0 extensions the interop peers use, and only those.
//
// dubbo-go's one-stop package dubbo.apache.org/dubbo-go/v3/imports registers every registry, config center,
// tracer and router it ships. Some start goroutines from init: polaris-go's clock alone ticks every 10 ms in
// every process that links it, which kept an idle provider at about 2% of a core. The peers here talk the dubbo
// protocol directly (no registry), so they need the dubbo protocol, the proxy factory, the failover cluster with
// random load balancing, and the filters dubbo-go puts on every service and reference by default
// (provider: echo, token, accesslog, tps, generic_service, execute, pshutdown; consumer: cshutdown).
// The wire behaviour (getty transport, dubbo codec, hessian2) is the same code either way.
package dubboext

import (
	_ "dubbo.apache.org/dubbo-go/v3/cluster/cluster/failover"
	_ "dubbo.apache.org/dubbo-go/v3/cluster/loadbalance/random"
	_ "dubbo.apache.org/dubbo-go/v3/filter/accesslog"
	_ "dubbo.apache.org/dubbo-go/v3/filter/echo"
	_ "dubbo.apache.org/dubbo-go/v3/filter/exec_limit"
	_ "dubbo.apache.org/dubbo-go/v3/filter/generic"
	_ "dubbo.apache.org/dubbo-go/v3/filter/graceful_shutdown"
	_ "dubbo.apache.org/dubbo-go/v3/filter/token"
	_ "dubbo.apache.org/dubbo-go/v3/filter/tps"
	_ "dubbo.apache.org/dubbo-go/v3/filter/tps/limiter"
	_ "dubbo.apache.org/dubbo-go/v3/filter/tps/strategy"
	_ "dubbo.apache.org/dubbo-go/v3/protocol/dubbo"
	_ "dubbo.apache.org/dubbo-go/v3/proxy/proxy_factory"
	_ "dubbo.apache.org/dubbo-go/v3/registry/directory"
	_ "dubbo.apache.org/dubbo-go/v3/registry/protocol"
)
